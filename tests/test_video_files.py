"""``eval --video`` files are whole or absent: an episode's video is written beside its name
and renamed once finished, so a Ctrl-C or an encoder error never leaves a short file that looks
like a recording (wheeler2/video.py ``_write``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wheeler2 import video


def frames(n: int) -> list[np.ndarray]:
    return [np.full((12, 16, 3), 20 * i, np.uint8) for i in range(n)]


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_a_video_is_written_whole_with_nothing_beside_it(tmp_path: Path, suffix: str) -> None:
    iio = pytest.importorskip("imageio.v2")
    if suffix == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    path = tmp_path / f"clip_ep0{suffix}"
    video._write(path, frames(9), fps=10)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    reader = iio.get_reader(path)
    count = reader.count_frames() if suffix == ".mp4" else len(iio.mimread(path))
    assert count == 9


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_interrupted_video_leaves_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """The writer dies after one frame (Ctrl-C, disk full): the old file stays, no new one."""
    iio = pytest.importorskip("imageio.v2")
    real = iio.mimsave

    def dies_after_one_frame(uri: Any, ims: Any, **kwargs: Any) -> None:
        real(uri, list(ims)[:1], **kwargs)  # a short but readable file under the name given
        raise error()

    old = tmp_path / "clip_ep0.gif"
    video._write(old, frames(5), fps=10)
    before = old.read_bytes()
    monkeypatch.setattr(iio, "mimsave", dies_after_one_frame)
    with pytest.raises(error):
        video._write(old, frames(7), fps=10)
    with pytest.raises(error):
        video._write(tmp_path / "clip_ep1.gif", frames(7), fps=10)
    assert old.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip_ep0.gif"]


def test_older_episodes_are_the_files_past_the_ones_written(tmp_path: Path) -> None:
    from wheeler2.video import older_episodes

    names = ["clip_ep0.gif", "clip_ep1.gif", "clip_ep2.gif", "clip_ep10.gif", "clip_ep3.mp4"]
    names += ["clip_ep01.gif", "clip_epx.gif", "other_ep4.gif", "clip[1]_ep2.gif"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    got = older_episodes(tmp_path / "clip.gif", 2)
    assert [p.name for p in got] == ["clip_ep2.gif", "clip_ep10.gif"]
    assert [p.name for p in older_episodes(tmp_path / "clip[1].gif", 1)] == ["clip[1]_ep2.gif"]

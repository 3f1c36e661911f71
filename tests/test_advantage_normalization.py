"""PPO, A2C and PG normalize advantages one way: the mean and the sample std (1/(n-1), as
SB3's and CleanRL's ``advantages.std()``) of the rows present. A masked batch then normalizes
its real rows as the same rows would be unmasked. A2C, PG and PPO's masked path once used the
population std (1/n), PPO's unmasked path the sample one: 12% apart at A2C's five rows."""

from __future__ import annotations

import torch
from wheeler2.agents.onpolicy import normalize_advantages


def test_unmasked_rows_take_the_sample_std() -> None:
    adv = torch.tensor([0.75, 0.5, 0.0, 2.0, -1.0])
    want = (adv - adv.mean()) / (adv.std() + 1e-8)  # torch's std is the sample one
    torch.testing.assert_close(normalize_advantages(adv, None), want)
    # By hand for the first three: deviations 1/3, 1/12, -5/12, variance (7/24) / 2.
    three = normalize_advantages(adv[:3], None)
    torch.testing.assert_close(three[0], torch.tensor((1 / 3) / (7 / 48) ** 0.5))


def test_masked_rows_normalize_as_the_same_rows_unmasked() -> None:
    adv = torch.tensor([0.75, 9.0, 0.5, 0.0, -4.0])
    w = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    real = normalize_advantages(adv[w > 0], None)
    torch.testing.assert_close(normalize_advantages(adv, w)[w > 0], real)


def test_under_two_rows_present_the_advantage_is_kept() -> None:
    adv = torch.tensor([0.75, 9.0, 0.5])
    w = torch.tensor([0.0, 1.0, 0.0])
    assert normalize_advantages(adv, w)[1].item() == 9.0
    assert normalize_advantages(torch.tensor([3.0]), None).item() == 3.0

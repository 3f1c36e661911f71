"""Parts agents are built from: memory (recurrent core and wrapper), distributions, ..."""

"""`conch build --shard K/N`: the ensembles split by a hash of their names, so N jobs with the same
sources build every ensemble exactly once, whatever the machine, the paths or their order."""

from __future__ import annotations

import random

import pytest

from conch.builder.discover import Shard, shard_of
from conch.errors import BuildError

NAMES = [f"ensemble_{i:04d}" for i in range(500)] + ["text_embeddings", "image_classifier", "a", "Ä-ü"]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16])
def test_the_shards_partition_the_ensembles(count: int) -> None:
    shards = [Shard(k, count) for k in range(1, count + 1)]
    held = [[n for n in NAMES if s.holds(n)] for s in shards]
    assert sorted(n for names in held for n in names) == sorted(NAMES)  # each name once, none left out
    if count > 1:  # spread, not all in one
        assert max(map(len, held)) < len(NAMES) * 0.6


def test_the_split_depends_on_the_names_alone() -> None:
    shuffled = NAMES[:]
    random.Random(7).shuffle(shuffled)
    assert {n: shard_of(n, 4) for n in shuffled} == {n: shard_of(n, 4) for n in NAMES}
    # sha256, not Python's per-process str hash: the same on every machine and in every process
    assert [shard_of(n, 4) for n in ("text_embeddings", "image_classifier", "a")] == [2, 2, 3]


@pytest.mark.parametrize("text", ["0/4", "5/4", "4", "a/b", "1/0", "-1/2", "1/4/2", "", " /4", "²/4"])
def test_a_bad_shard_says_what_to_write(text: str) -> None:
    with pytest.raises(BuildError, match=rf"--shard {text!r}: expected K/N with 1 <= K <= N \(e\.g\. --shard 1/4"):
        Shard.parse(text)


def test_a_good_shard_reads_back() -> None:
    assert Shard.parse("2/5") == Shard(2, 5) and str(Shard.parse("2/5")) == "2/5"

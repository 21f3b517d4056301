"""Process groups per the StableHLO spec's examples (flattened ids: replica * partitions + partition)."""

from __future__ import annotations

import pytest

from pjrt_hub.backends.stablehlo.collectives import Collective, CollectiveError


def _spec(kind="all_reduce", groups=((0, 1), (2, 3)), channel=0, global_ids=False):
    return Collective(kind=kind, key=0, groups=groups, channel_id=channel, use_global_device_ids=global_ids)


def flat(pairs, partitions):
    return tuple(tuple(r * partitions + p for r, p in g) for g in pairs)


def test_the_four_strategies():
    # The spec's examples, with num_partitions = 2.
    assert _spec().process_groups(4, 2) == flat(
        [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(2, 0), (3, 0)], [(2, 1), (3, 1)]], 2)
    assert _spec(kind="all_to_all", groups=((0, 1),), channel=1).process_groups(4, 2) == flat(
        [[(0, 0), (0, 1)], [(1, 0), (1, 1)], [(2, 0), (2, 1)], [(3, 0), (3, 1)]], 2)
    assert _spec(channel=1).process_groups(4, 2) == flat(
        [[(0, 0), (1, 0), (0, 1), (1, 1)], [(2, 0), (3, 0), (2, 1), (3, 1)]], 2)
    assert _spec(groups=((0, 1, 2, 3), (4, 5, 6, 7)), channel=1, global_ids=True).process_groups(4, 2) == (
        (0, 1, 2, 3), (4, 5, 6, 7))


def test_empty_groups_mean_everyone_and_permute_pairs():
    assert _spec(groups=()).process_groups(3, 1) == ((0, 1, 2),)
    permute = _spec(kind="collective_permute", groups=((0, 1), (1, 2)))
    assert permute.process_groups(3, 1) == ((0, 1), (1, 2))


@pytest.mark.parametrize("groups,message", [
    (((0, 1),), r"leave out \[2, 3\]"),
    (((0, 1), (1, 2, 3)), "appears twice"),
    (((0, 5), (1, 2)), "out of range"),
])
def test_bad_groups_are_named(groups, message):
    with pytest.raises(CollectiveError, match=message):
        _spec(groups=groups).process_groups(4, 1)

"""pjrt-hub bench --collectives: the programs it times are right, and it reports each op and size."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub._bench_collectives import OPS, bench_collectives, format_table, program
from pjrt_hub._multi import run_on_devices


@pytest.mark.parametrize("op", OPS)
def test_each_timed_program_computes_its_collective(client, op):
    x = [np.arange(8, dtype=np.float32), np.arange(8, dtype=np.float32) + 100]
    got = run_on_devices(client, program(op, 8), [[a] for a in x], timeout=60).outputs
    expected = {
        "all_reduce": [x[0] + x[1]] * 2,
        "all_gather": [np.concatenate(x)] * 2,
        "reduce_scatter": [(x[0] + x[1])[:4], (x[0] + x[1])[4:]],
        "all_to_all": [np.concatenate([x[0][:4], x[1][:4]]), np.concatenate([x[0][4:], x[1][4:]])],
        "collective_permute": [x[1], x[0]],
        "collective_broadcast": [x[0], x[0]],
    }[op]
    for row, want in zip(got, expected):
        np.testing.assert_array_equal(row[0], want)


def test_the_report_has_every_op_and_size(client):
    rows = bench_collectives(client, ops=("all_reduce", "all_gather"), sizes=(4096, 8192))
    assert [(r["op"], r["bytes"]) for r in rows] == [("all_reduce", 4096), ("all_reduce", 8192),
                                                     ("all_gather", 4096), ("all_gather", 8192)]
    assert all(r["min_ms"] <= r["median_ms"] for r in rows)
    table = format_table(rows, "t")
    assert "all_gather" in table and "8 KiB" in table

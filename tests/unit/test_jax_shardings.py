"""Shardy shardings as pjrt_hub.jax reads them (pure Python: no JAX needed).

``Sharding.slices`` decides which part of a global array each device of a partitioned program
gets, ``Mesh.position`` where a logical device sits; both must follow Shardy's conventions
(major-to-minor axes, ``device_ids`` order) or devices get each other's shards.
"""

from __future__ import annotations

import pytest

from pjrt_hub.abi import InvalidArgument, Unimplemented
from pjrt_hub.jax._programs import Mesh, Sharding

MESH_2x2 = Mesh((("a", 2), ("b", 2)))


def test_mesh_text_is_read_with_its_device_order():
    mesh = Mesh.parse('<["x"=2, "y"=3], device_ids=[5, 4, 3, 2, 1, 0]>')
    assert mesh.axes == (("x", 2), ("y", 3)) and mesh.size == 6
    assert mesh.position(0) == {"x": 1, "y": 2} and mesh.position(5) == {"x": 0, "y": 0}
    with pytest.raises(InvalidArgument, match="device 9 is not in the mesh"):
        mesh.position(9)


def test_a_dimension_split_over_two_axes_runs_major_to_minor():
    sharding = Sharding.parse('#sdy.sharding<@m, [{"a", "b"}, {}]>', {"m": MESH_2x2})
    assert [sharding.slices((8, 3), device)[0] for device in range(4)] == [
        slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    assert sharding.slices((8, 3), 1)[1] == slice(0, 3)


def test_axes_on_two_dimensions_and_an_uneven_split():
    sharding = Sharding.parse('#sdy.sharding<@m, [{"b"}, {"a"}]>', {"m": MESH_2x2})
    assert sharding.slices((5, 4), 1) == (slice(3, 5), slice(0, 2))  # ceil(5 / 2) = 3 rows a shard
    assert sharding.slices((5, 4), 2) == (slice(0, 3), slice(2, 4))


def test_replicated_and_open_dimensions_hold_everything():
    meshes = {"m": MESH_2x2}
    for text in ('#sdy.sharding<@m, [{}, {}]>', '#sdy.sharding<@m, [{?}, {}]>', '#sdy.sharding<@m, []>'):
        sharding = Sharding.parse(text, meshes)
        assert sharding.replicated and sharding.op_sharding(2) == b""


def test_forms_that_are_not_read_are_refused_by_name():
    with pytest.raises(Unimplemented, match="sub-axes"):
        Sharding.parse('#sdy.sharding<@m, [{"a":(1)2}]>', {"m": MESH_2x2})
    with pytest.raises(InvalidArgument, match="names the mesh @other"):
        Sharding.parse('#sdy.sharding<@other, [{"a"}]>', {"m": MESH_2x2})


def test_op_sharding_lists_the_devices_of_each_tile_and_replicates_over_unused_axes():
    sharding = Sharding.parse('#sdy.sharding<@m, [{"b"}]>', {"m": MESH_2x2})
    # OTHER; tile dims [2, 2] (b splits dim 0, a replicates); devices by tile; replicate_on_last_tile_dim
    assert sharding.op_sharding(1) == bytes([0x08, 0x03, 0x1A, 0x02, 0x02, 0x02, 0x22, 0x04, 0x00, 0x02, 0x01, 0x03,
                                             0x30, 0x01])

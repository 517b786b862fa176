"""The sweep (odradek.sim.sweep) with a fake run function: one Parquet row per seed, in
seed order, whatever the slicing; a seed that raises or kills its worker becomes a crash
row instead of ending the sweep; on Spark, the same table, and the shared session lives on."""

from __future__ import annotations

import pytest

from odradek.sim.result import COLUMNS
from odradek.sim.sweep import sweep

from .fakes import CRASH_SEED, KILLER_SEED, dying_run, fake_result, fake_run

pq = pytest.importorskip("pyarrow.parquet")


def read(path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_one_row_per_seed_with_the_run_values(tmp_path):
    path = sweep(range(20), master=None, out_dir=tmp_path, run=fake_run)
    assert path == tmp_path / "sweep.parquet"
    table = pq.read_table(path)
    assert table.column_names == list(COLUMNS)
    types = {f.name: str(f.type) for f in table.schema}
    assert types["seed"] == "int64" and types["converged"] == "bool" and types["protocol"] == "string"
    assert types["wall_s"] == "double" and types["moved_per_member_event"] == "double"
    rows = table.to_pylist()
    assert [r["seed"] for r in rows] == list(range(20))
    for r in rows:
        if r["seed"] != CRASH_SEED:
            assert r == fake_result(r["seed"]).as_row()
    crash = rows[CRASH_SEED]
    assert crash["violations"] == 1 and crash["violation_kinds"] == "crash"
    assert crash["first_violation"] == f"RuntimeError: boom at seed {CRASH_SEED}"
    assert crash["protocol"] == "unknown" and not crash["converged"]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it


def test_slicing_and_seed_order_do_not_change_the_table(tmp_path):
    a = sweep(range(15), master=None, out_dir=tmp_path / "a", run=fake_run, slices=1)
    b = sweep([14, 3, 3, *range(15)], master=None, out_dir=tmp_path / "b", run=fake_run, slices=7)
    assert without_wall(read(a)) == without_wall(read(b))


def test_a_forced_protocol_reaches_every_seed_and_its_crash_row(tmp_path):
    rows = read(sweep(range(8), protocol="classic-eager", master=None, out_dir=tmp_path, run=fake_run))
    assert {r["protocol"] for r in rows} == {"classic-eager"}
    assert rows[CRASH_SEED]["violation_kinds"] == "crash"


def test_a_dead_worker_costs_only_its_own_seed(tmp_path):
    rows = read(sweep(range(12), master=None, out_dir=tmp_path, run=dying_run, slices=3))
    assert [r["seed"] for r in rows] == list(range(12))
    dead = rows[KILLER_SEED]
    assert dead["violation_kinds"] == "crash" and dead["first_violation"].startswith("worker process died")
    assert without_wall([r for r in rows if r["seed"] != KILLER_SEED]) == without_wall(
        [fake_result(s).as_row() for s in range(12) if s != KILLER_SEED])


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown protocol"):
        sweep(range(3), protocol="nope", master=None, out_dir=tmp_path, run=fake_run)
    with pytest.raises(ValueError, match="no seeds"):
        sweep([], master=None, out_dir=tmp_path, run=fake_run)
    with pytest.raises(TypeError, match="picklable"):
        sweep(range(3), master=None, out_dir=tmp_path, run=lambda seed, protocol: fake_result(seed, protocol))
    assert not (tmp_path / "sweep.parquet").exists()


@pytest.mark.spark
def test_spark_gives_the_same_table_and_keeps_the_shared_session(spark, tmp_path):
    from pyspark import cloudpickle

    from . import fakes

    # By value: Spark's Python workers need not be able to import the tests package.
    cloudpickle.register_pickle_by_value(fakes)
    try:
        path = sweep(range(8), master="local[2]", out_dir=tmp_path / "spark", run=fakes.fake_run, slices=3)
    finally:
        cloudpickle.unregister_pickle_by_value(fakes)
    local = sweep(range(8), master=None, out_dir=tmp_path / "local", run=fake_run)
    assert without_wall(read(path)) == without_wall(read(local))
    assert spark.range(3).count() == 3  # the test session was not stopped

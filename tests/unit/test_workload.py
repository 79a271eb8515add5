"""How `make test` hands its files to xdist's workers (tests/support/workload.py)."""

from __future__ import annotations

import pytest

from tests.support import workload
from tests.support.workload import SHARED_STACK_MODULES, stack_groups, unit_of


def test_every_shared_stack_module_is_in_exactly_one_of_two_balanced_groups(monkeypatch):
    monkeypatch.delenv("EXPORT_TEST_SHARED_STACKS", raising=False)
    groups = stack_groups(list(SHARED_STACK_MODULES), workload.shared_stacks())
    assert sorted(groups) == sorted(SHARED_STACK_MODULES)
    assert set(groups.values()) == {"shared-stack-1", "shared-stack-2"}
    load = {g: sum(workload.SECONDS[p] for p, x in groups.items() if x == g)
            for g in set(groups.values())}
    # Longest first onto the lightest group: the two differ by less than the shortest module
    # that could move, within the longest module's seconds.
    assert abs(load["shared-stack-1"] - load["shared-stack-2"]) <= max(workload.SECONDS[p]
                                                                      for p in groups)


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_modules_listed_together_share_a_group_whatever_the_count(count):
    groups = stack_groups(list(SHARED_STACK_MODULES), count)
    for together in workload.TOGETHER:
        assert len({groups[path] for path in together}) == 1, (count, groups)
    assert len(set(groups.values())) == count


def test_a_shared_stack_module_runs_in_its_group_and_every_other_file_alone(monkeypatch):
    monkeypatch.setenv("EXPORT_TEST_SHARED_STACKS", "1")
    assert unit_of("tests/system/scheduler/test_alerts.py::test_x") == "shared-stack-1"
    assert unit_of("tests/system/scheduler/test_catchup.py::test_y[a::b]") == "shared-stack-1"
    # A stack of its own: a unit of its own; a folder's modules sharing one stack: one unit.
    assert unit_of("tests/system/scheduler/test_runaway_x.py::test_z") == (
        "tests/system/scheduler/test_runaway_x.py")
    assert unit_of("tests/system/tenants/test_company_view.py::test_v") == unit_of(
        "tests/system/tenants/test_pg_server.py::test_p") == "tests/system/tenants/"
    assert unit_of("tests/unit/time/test_window.py::test_w[x@y]") == (
        "tests/unit/time/test_window.py")


COUNTS = [("EXPORT_TEST_SHARED_STACKS", workload.shared_stacks, 2),
          ("EXPORT_TEST_MAX_STACKS", workload.max_stacks, 3),
          ("EXPORT_TEST_AIRFLOW_WORKERS", workload.airflow_workers, 2)]


@pytest.mark.parametrize(("variable", "read", "default"), COUNTS)
@pytest.mark.parametrize("value", ["0", "two", "-1", ""])
def test_a_bad_count_is_refused_with_the_fix(monkeypatch, variable, read, default, value):
    monkeypatch.setenv(variable, value)
    what = "workers" if variable == "EXPORT_TEST_AIRFLOW_WORKERS" else "stacks"
    with pytest.raises(pytest.UsageError, match=rf"{variable}='{value}': give a whole number "
                                                rf"of {what}, 1 or more \(default {default}\)"):
        read()


@pytest.mark.parametrize(("variable", "read", "default"), COUNTS)
def test_each_count_has_its_default_and_takes_a_whole_number(monkeypatch, variable, read,
                                                              default):
    monkeypatch.delenv(variable, raising=False)
    assert read() == default
    monkeypatch.setenv(variable, "5")
    assert read() == 5


class _Item:
    """What plan() reads of a pytest item."""

    def __init__(self, nodeid: str, fixtures: tuple[str, ...] = ()) -> None:
        self.nodeid, self.fixturenames, self.module = nodeid, fixtures, None


def test_units_go_out_longest_first_each_kept_together_in_collected_order(monkeypatch):
    monkeypatch.setenv("EXPORT_TEST_SHARED_STACKS", "2")
    ids = ["tests/unit/a/test_one.py::t1", "tests/integration/test_two.py::t2",
           "tests/system/scheduler/test_alerts.py::t3", "tests/system/soak/test_soak.py::t4",
           "tests/unit/a/test_one.py::t5", "tests/system/cluster/test_cluster.py::t6",
           "tests/system/scheduler/test_catchup.py::t7"]
    items = [_Item(i, ("scheduler_stack",) if "/scheduler/" in i else ()) for i in ids]
    tiers = {i.split("::")[0]: i.split("/")[1] for i in ids}
    ordered = [i.nodeid.rsplit("::", 1)[1] for i in workload.plan(items, tiers)]
    # cluster (402 s), catch-up's group (240 s + a stack's boot), alerts' (180 s + a boot: the
    # two are in different groups), the soak (157 s); then the unmeasured files by tier
    # (integration before unit), each file's tests together.
    assert ordered == ["t6", "t7", "t3", "t4", "t2", "t1", "t5"]


def test_a_folder_units_files_go_out_together_by_their_summed_seconds(monkeypatch):
    folder = "tests/system/tenants/"
    for name in ("test_company_view.py", "test_isolation_and_secrets.py"):
        monkeypatch.setitem(workload.SECONDS, folder + name, 100)
    monkeypatch.setitem(workload.SECONDS, "tests/system/soak/test_soak.py", 157)
    ids = ["tests/unit/test_u.py::u", f"{folder}test_company_view.py::c1",
           "tests/system/soak/test_soak.py::s", f"{folder}test_company_view.py::c2",
           f"{folder}test_isolation_and_secrets.py::i", f"{folder}test_pg_server.py::p"]
    tiers = {i.split("::")[0]: i.split("/")[1] for i in ids}
    ordered = [i.nodeid.rsplit("::", 1)[1] for i in workload.plan([_Item(i) for i in ids], tiers)]
    # The folder: 100 + 100 + 10 (unmeasured) s > the soak's 157 s; its files in collected order.
    assert ordered == ["c1", "c2", "i", "p", "s", "u"]


def test_a_module_on_the_shared_stack_missing_from_the_list_is_refused(monkeypatch):
    item = _Item("tests/system/scheduler/test_new.py::t", ("shared_stack",))
    with pytest.raises(pytest.UsageError, match=r"tests/system/scheduler/test_new.py use the "
                                                r"shared stack: add them to SHARED_STACK_MODULES"):
        workload.plan([item], {"tests/system/scheduler/test_new.py": "system"})


QUEUE = ["tests/system/cluster/test_cluster.py", "shared-stack-1",
         "tests/integration/cli/test_run.py", "tests/unit/test_tiers.py"]


UP = {"tests/system/soak/test_soak.py", "tests/system/tenants/", "tests/system/cluster/test_ha.py"}


def test_a_worker_starts_a_stack_only_while_fewer_than_the_limit_are_up():
    two = {"tests/system/soak/test_soak.py", "tests/system/tenants/"}
    assert workload.next_unit(QUEUE, node_has_stack=False, stacks_up=two, limit=3) == QUEUE[0]
    # Three up: the worker takes the first unit without a stack.
    assert workload.next_unit(QUEUE, node_has_stack=False, stacks_up=UP, limit=3) == QUEUE[2]
    # A worker holding a stack queues the next stack unit behind it (one after the other).
    assert workload.next_unit(QUEUE, node_has_stack=True, stacks_up=UP, limit=3) == QUEUE[0]
    # Only stack units left and the limit reached: nothing for this worker.
    assert workload.next_unit(QUEUE[:1], node_has_stack=False, stacks_up=UP, limit=3) is None
    assert workload.next_unit([], node_has_stack=True, stacks_up=set(), limit=3) is None


def test_a_shared_stack_group_joins_the_shared_stack_whatever_the_count():
    """The groups share one stack: a second group starts none, so the limit does not hold it
    back (6 Dec: counted as a stack each, they kept the tenants' stack waiting for a place
    until 569 s of a 675 s run, its last 90 s at 6-70 % of the CPU)."""
    with_shared = UP - {"tests/system/cluster/test_ha.py"} | {"shared-stack"}
    assert workload.next_unit(QUEUE, node_has_stack=False, stacks_up=with_shared,
                              limit=3) == "shared-stack-1"
    assert workload.next_unit(QUEUE, node_has_stack=False, stacks_up=UP, limit=3) == QUEUE[2]
    assert workload.stack_of("shared-stack-1") == workload.stack_of("shared-stack-2")
    assert workload.stack_of("tests/system/soak/test_soak.py") == "tests/system/soak/test_soak.py"


AIRFLOW_QUEUE = ["tests/dags/test_start_parity.py", "tests/integration/cli/test_run.py",
                 "tests/dags/test_ui.py", "tests/unit/test_tiers.py"]


def test_a_worker_loads_airflow_only_while_fewer_than_the_limit_have():
    def pick(queue, has, others, limit=2):
        return workload.next_unit(queue, node_has_stack=False, stacks_up=set(), limit=3,
                                  node_has_airflow=has, airflow_nodes=others,
                                  airflow_limit=limit)
    assert pick(AIRFLOW_QUEUE, has=False, others=1) == AIRFLOW_QUEUE[0]
    # Two other workers have Airflow: this one takes the first unit that does not load it.
    assert pick(AIRFLOW_QUEUE, has=False, others=2) == AIRFLOW_QUEUE[1]
    # A worker that has loaded Airflow takes the next unit that loads it, whatever the count.
    assert pick(AIRFLOW_QUEUE, has=True, others=3) == AIRFLOW_QUEUE[0]
    # Only Airflow units left and the limit reached: nothing for this worker (it shuts down).
    assert pick(AIRFLOW_QUEUE[::2], has=False, others=2) is None
    assert pick(AIRFLOW_QUEUE[::2], has=False, others=2, limit=3) == AIRFLOW_QUEUE[0]
    # Without a limit (the default), any worker takes them.
    assert workload.next_unit(AIRFLOW_QUEUE, node_has_stack=False, stacks_up=set(), limit=3,
                              node_has_airflow=False, airflow_nodes=9) == AIRFLOW_QUEUE[0]


def test_only_the_dags_tier_counts_as_loading_airflow():
    assert workload.loads_airflow("tests/dags/test_ui.py")
    for unit in ("tests/unit/test_tiers.py", "tests/integration/cli/test_run.py",
                 "tests/system/deploy/test_install.py", "shared-stack-1",
                 "tests/system/soak/test_soak.py"):
        assert not workload.loads_airflow(unit), unit


def test_shared_groups_and_system_files_with_a_stack_count_as_stacks_and_nothing_else_does():
    assert workload.is_stack_unit("shared-stack-2")
    assert workload.is_stack_unit("tests/system/soak/test_soak.py")
    assert not workload.is_stack_unit("tests/dags/test_ui.py")
    assert not workload.is_stack_unit("tests/system/deploy/test_install.py")  # no stack
    assert not workload.is_stack_unit("tests/integration/pipeline/test_reschedule.py")


def test_the_shared_stack_is_done_once_every_group_was_handed_out_and_run():
    done = workload.shared_stack_done
    running = {"shared-stack-1": {"a::t1": True, "a::t2": False},
               "tests/unit/test_x.py": {"x::t": False}}
    finished = {"shared-stack-2": {"b::t": True}}
    assert not done([], [running, finished])  # group 1's last test still runs
    running["shared-stack-1"]["a::t2"] = True
    assert done([], [running, finished])
    assert not done(["shared-stack-3"], [running, finished])  # a group not handed out yet
    assert not done(["tests/unit/test_y.py"], [{"tests/unit/test_x.py": {"x::t": True}}])

"""The staleness bound alone: what the producer may admit per policy version, and which groups may still train."""
from __future__ import annotations

from rlsim.sim.admission import StalenessAdmission


def test_one_step_off_admits_whole_batches_one_version_ahead():
    rule = StalenessAdmission(1, per_version=4, batch=4)
    assert [rule.admit(0), rule.admit(0), rule.admit(0)] == [4, 4, 0]  # batches 0 and 1 while the policy is v0
    assert [rule.admit(1), rule.admit(1)] == [4, 0]


def test_a_fractional_bound_admits_that_fraction_of_a_batch_ahead():
    rule = StalenessAdmission(0.5, per_version=4)
    assert [rule.admit(0), rule.admit(0)] == [6, 0]  # ⌊(0 + 0.5 + 1)·4⌋
    assert rule.admit(1) == 4
    assert (rule.fresh(0, 1), rule.fresh(0, 2)) == (True, False)  # at most ⌈0.5⌉ = 1 version stale


def test_a_dropped_group_may_be_replaced():
    rule = StalenessAdmission(0, per_version=2)
    assert [rule.admit(0), rule.admit(0)] == [2, 0]
    rule.replace()
    assert [rule.admit(0), rule.admit(0)] == [1, 0]
    assert (rule.fresh(3, 3), rule.fresh(2, 3)) == (True, False)

"""Tiers are transparent (spec/tiers.md, TIER-2): a DDR or SSD table driven
through random calls returns exactly what an HBM table with dynamic expansion
returns, after every step, on every backend -- while its rows move between
the device budget, host memory and disk files (``machines.TieredVersusFlat``)."""
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from .machines import TieredVersusFlat


def test_tier_2_tiered_tables_return_what_a_flat_table_returns(backend):
    """TIER-2, TIER-4, TIER-5, TIER-6, TIER-8, TIER-10: DDR and SSD tables agree
    with an HBM table with dynamic expansion after every step of random call
    sequences; tier sizes stay within their budgets."""
    run_state_machine_as_test(lambda: TieredVersusFlat(backend),
                              settings=settings(settings.default, stateful_step_count=25))

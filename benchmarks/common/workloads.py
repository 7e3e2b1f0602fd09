"""The two applications of the paper's evaluation, and their hand-written baselines.

- **survey**: ``samples.survey``'s ``respond`` (record a response after
  validating it against the survey, checkpoint, count it);
- **auction**: ``samples.auction``'s ``bid`` (``now()``, place the bid if
  it is in time, not the seller's, above the minimum and beats the maximum;
  checkpoint; lead; count) on items registered by the sample's ``register``.

Each baseline is what a careful engineer writes with the SDK for the same
business logic and the same stored data, without idempotence: the same
reads where the logic needs them, conditional writes where the backend has
them (a DynamoDB condition instead of a read where that suffices), no memo,
no run record, no completion record. A baseline request is one call of the
object; it tallies its calls and logical bytes like :class:`CountingStore`.

Each workload lives in a module of its own (:mod:`benchmarks.common.workload_survey`,
:mod:`benchmarks.common.workload_auction`) on the pieces of :mod:`benchmarks.common.workload_base`;
this module names them for ``--workloads``.
"""

from __future__ import annotations

from benchmarks.common.workload_auction import AUCTION_WORKLOAD
from benchmarks.common.workload_survey import SURVEY_WORKLOAD

WORKLOADS = {"survey": SURVEY_WORKLOAD, "auction": AUCTION_WORKLOAD}

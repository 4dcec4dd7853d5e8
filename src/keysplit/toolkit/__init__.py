"""keysplit in your own streamparse topology: any grouping on any keyed edge, and the merge step split keys need.

>>> from keysplit.toolkit import Aggregate, Count, FeedSpout, KeyRouter, Sum, Topology

- :class:`KeyRouter` puts a keysplit grouping (``pkg:d=2``, ``dchoices``, ``fish``, ...) in front of any bolt;
- :class:`Aggregate` (``partial`` and ``merge``) is the two-stage keyed aggregation, with the accumulators
  :class:`Count`, :class:`Sum`, :class:`TopK` and :class:`HeavyHitters` or your own :class:`Accumulator`;
- :class:`FeedSpout` reads keysplit's Redis feed (``keysplit run --dataset csv:...``), which gives exactly-once
  results and loads that equal ``keysplit simulate`` record for record;
- :class:`Topology` is streamparse's own class (so `sparse submit` deploys yours), checked by :func:`check_topology`
  when keysplit loads the file.

docs/guides/your-topology.md walks through it; docs/design/toolkit.md says how it works.
"""

from keysplit.toolkit.accumulators import Accumulator, AccumulatorError, Count, HeavyHitters, Sum, TopK
from keysplit.toolkit.router import KeyRouter
from keysplit.toolkit.specs import (
    Aggregate,
    Topology,
    TopologyBuildError,
    check_topology,
    splits_keys,
)
from keysplit.toolkit.spout import FeedSpout  # the component classes: streamparse puts spec on them

__all__ = [
    "Accumulator",
    "AccumulatorError",
    "Aggregate",
    "Count",
    "FeedSpout",
    "HeavyHitters",
    "KeyRouter",
    "Sum",
    "TopK",
    "Topology",
    "TopologyBuildError",
    "check_topology",
    "splits_keys",
]

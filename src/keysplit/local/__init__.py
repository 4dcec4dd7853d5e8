"""Run a streamparse topology on one machine over Storm's multi-lang protocol (see ``cluster.py``).

>>> from keysplit.local import LocalCluster, TopologyError
"""

from .cluster import LocalCluster
from .topology import TopologyError

__all__ = ["LocalCluster", "TopologyError"]

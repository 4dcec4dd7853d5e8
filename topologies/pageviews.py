"""Bytes served per page, with the top pages: a toolkit topology, built only from keysplit's public API.

    keysplit datasets generate pageviews:keys=2000,messages=20000,seed=1 --out views.csv
    keysplit run topologies/pageviews.py --dataset csv:views.csv,key=page --worker-processes 2

The feed's rows ``(time, page, bytes)`` go to the routers as ``keysplit simulate -S 2`` deals records to its sources;
each router puts the page on one of the partial stage's 4 tasks with PKG (d = 2: a hot page splits over two tasks),
deciding on the rows' own time column (so ``keysplit simulate --dataset csv:views.csv,key=page,time=time -S 2 -W 4``
makes the same decisions),
the partial stage sums bytes per page for a second, and the merge stage adds the partial sums per page, commits
them exactly once and keeps the 10 pages with the most bytes. The grouping is the ``KEYSPLIT_GROUPING`` environment
variable when it is set (``KEYSPLIT_GROUPING=dchoices keysplit run topologies/pageviews.py ...``), for comparing
groupings on the same topology; ``keysplit advise --dataset csv:views.csv,key=page`` recommends one.
"""

import os

from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology

GROUPING = os.environ.get("KEYSPLIT_GROUPING", "pkg:d=2")


class PageBytes(Topology):
    views = FeedSpout.spec(fields=["time", "page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping=GROUPING, time="time", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), period=1.0, par=4)
    total = Aggregate.merge(inputs=partial, top=10, par=2)

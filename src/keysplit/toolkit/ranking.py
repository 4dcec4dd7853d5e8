"""How ``Aggregate.merge(top=N)`` orders keys: by result, largest first, ties by the key's JSON text.

A result ranks when it is a finite number (``int`` or ``float``, not ``bool``); a key whose result is anything else
(a list, a dict, text, None, NaN) is left out of the top list, never compared: a user's accumulator may return any
JSON value, and the merge task and the run's summary must not fail on one. Every result, ranked or not, is in the
merge's results (``keysplit run FILE --results-out``).

>>> top_results([("a", 3), ("b", [1]), ("c", 3.5), ("d", True), ("e", 3)], 3)
[('c', 3.5), ('a', 3), ('e', 3)]
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable
from typing import Any


def ranks(result: Any) -> bool:
    """Whether ``result`` is a number ``top=`` can rank by."""
    return isinstance(result, (int, float)) and not isinstance(result, bool) and math.isfinite(result)


def top_results(items: Iterable[tuple[Any, Any]], n: int) -> list[tuple[Any, Any]]:
    """The ``n`` ``(key, result)`` pairs with the largest numeric results, largest first, ties by the key's JSON
    text (keys may be text or numbers: JSON text orders them all)."""
    ranked = ((-result, key if isinstance(key, str) else json.dumps(key), key, result)
              for key, result in items if ranks(result))
    return [(key, result) for _, _, key, result in heapq.nsmallest(n, ranked, key=lambda t: (t[0], t[1]))]

"""Stream summaries the groupings keep per source, all behind one verb: ``update(key)`` counts one item.

:class:`~keysplit.sketches.spacesaving.SpaceSaving` (D-/W-Choices' heavy hitters; returns the key's upper
estimate), :class:`~keysplit.sketches.epoch.EpochCounter` (FISH's decayed epoch counts; returns the key's
counter) and :class:`~keysplit.sketches.lossy.LossyCounter` / ``SlidingLossyCounter`` (Gedik's frequent keys).
"""

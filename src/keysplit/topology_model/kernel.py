"""The topology model's event loop (numba): a discrete-event model of the word-count topology as ``keysplit run``
runs it (the replay's ``--arrivals closed`` and ``--arrivals open`` estimates).

What the model follows, each a fact of the topology (``keysplit.storm``, ``keysplit.local``):

- **the spout** emits a line (a record with all its words) whenever fewer than its adaptive window of lines are
  in flight (the spout's rule, :mod:`keysplit.topology_model.window`), at most ``max_pending`` x ``spouts``
  (``topology.max.spout.pending``, Storm's back-pressure: apache/storm
  ``storm-client/src/jvm/org/apache/storm/executor/spout/SpoutExecutor.java`` calls ``nextTuple`` only while
  ``pending.size() < maxSpoutPending``); with ``--rate R`` line i is not emitted before ``i / R`` s (open loop,
  max pending still a cap);
- **the runner** (one thread: the multi-lang runner, routers and protocol) handles the words one after the
  other, ``word_us`` each, and each tuple it sends to a counter, ``overhead_us`` each: with one tuple per word
  (``batch`` 1) a word costs ``word_us + overhead_us``, the per-tuple overhead measured by a calibration run with
  no CPU delay, whose throughput is ``1e6 / (word_us + overhead_us)`` words/s (see
  :func:`~keysplit.topology_model.calibration.calibrate`); a tuple then reaches its counter ``hop_delay_ms`` later
  (the hops through the router processes, which on a shared machine wait for a core);
- **batches** (``batch`` B > 1, ``batch_ms`` T; ``keysplit.storm.router.Batcher``): a line goes to router
  ``source`` (the spout deals lines to routers), whose words wait in one batch per (router, counter); a batch
  leaves as one tuple once it holds B words, right after the word that filled it, or T after its first word,
  whichever comes first; so the runner pays ``overhead_us`` once per batch, and a word waits at most T in it;
- **a counter** serves its tuples first come first served, ``cpu_delay_ms`` per word plus ``counter_overhead_us``
  per tuple (the sleep, and what one tuple costs the counter process: reading it, and the sleep's overshoot, which
  a batch pays once, ``CounterBolt.count_batch``); the words it has served wait for its next tick tuple;
- **flushes at the multiples of T**: every counter flushes at the instants ``tick_phase + k * T``, ``T`` the flush
  period, the wall clock's multiples of T (storm/flush_clock.py): an idle counter's timer flushes at the instant,
  a busy one right after the tuple that ends past it (``CounterBolt.process``), so one with a backlog flushes every
  period as it works through it, and again at its tick, which waits behind the backlog; with ``--batch 1`` every
  aggregator commits at its tick at the same instants (the local runner starts ticks at the clock's multiples of
  their period, ``topology.tick.tuple.freq.secs``: whole seconds, ``max(1, round(flush))``, so the model's ticks
  are exact when T is whole seconds);
- **flush-then-ack**: at a flush a counter emits one partial count per distinct word it served since the last
  flush (``tuple_us`` each), anchored to the words, and then acks its input tuples (``tuple_us`` each), in that
  order (``keysplit.storm.bolts.CounterBolt.flush``): the partial counts leave before the acks; each goes to
  the aggregator of its word (the runner's fields hash), which serves it in ``tuple_us`` and, with ``batch`` 1,
  holds it until the aggregator's next tick; with batches the counter emits one tuple per aggregator its words go
  to, not one per word (``CounterBolt.emit_flushes``), and the aggregator receives that one and commits it at once
  (it holds the whole of that flush for this aggregator: ``AggregatorBolt.process``); a commit (``commit_us``
  per partial count: merging, the Redis commit, the acks, as the aggregators measure it, see
  :func:`~keysplit.topology_model.calibration.calibrate`) ends with the ack, and the line is complete
  ``ack_delay_ms`` later (the top-k bolt, the acker, the spout's ack) once every word of it is acked.

Each kind of event has its helper (``_on_emit``, ``_on_arrive``, ``_on_batch_due``, ``_on_tick``, ``_on_partial``,
``_on_ack``), which reads and writes the loop's scalars in the state arrays ``iv`` and ``fv``.

Over 400 lines: the event loop and every helper it calls stay in this one file, because numba's cache of a
compiled function checks only its own file's time stamp: a helper edited in another file would leave the cached
kernel stale.

Not modelled: message timeouts re-emitting a line (the lines that would exceed ``message_timeout`` are counted
in ``timeouts``; a run that replayed lines is outside the model), task restarts, and CPU contention beyond the
runner's serial stage.
"""


import math

import numba
import numpy as np

from keysplit import latency
from keysplit.storm.spout_pacing import CATCH_UP_SECS
from keysplit.topology_model.window import W_CUTS, note_full, on_complete, window_lines

#: Event kinds of the simulation.
_EMIT, _ARRIVE, _TICK, _PARTIAL, _ACK, _FLUSH = 0, 1, 2, 3, 4, 5

#: Slots of the kernel's integer state (``iv``) and float state (``fv``).
_I_HEAP, _I_SEQ, _I_NEXT_LINE, _I_PENDING, _I_COMPLETED, _I_WAITING, _I_TIMEOUTS, _I_STAMP, _I_NEXT_WORD, \
    _I_LINES, _I_OLDEST, _I_STARTED = range(12)
_F_RUNNER, _F_FIRST, _F_LAST, _F_SUM, _F_COMP, _F_MAX, _F_MIN, _F_LAG = range(8)
#: Slots of the kernel's settings (``settings``, float64; times in seconds): a counter's time per word (the CPU
#: delay), the runner's per tuple sent to a counter, a tuple's in a tick, an aggregator's per partial count, the ack
#: delay, the flush period T (the ticks' period) and phase, the lines in flight at most, the rate (0: closed loop),
#: the message timeout, the hop to a counter, the runner's per word, a counter's per input tuple, the batch size
#: (words) and wait, the most ticks the loop follows (its bound on its own work).
#: Then the topology's shape (``_S_SHAPE``): 0 the word count, 1 a toolkit topology (keysplit.toolkit: partials flush
#: one tuple per merge task, which commits it at once).
#: With the toolkit's shape the spout emits ahead of the stages, ``_S_SPOUT`` apart (its own time per row), and a
#: merge task spends ``_S_MERGE_ENTRY`` per partial-state entry of a flush it receives (0 in the word count's shape).
_S_SERVICE, _S_RUNNER, _S_TUPLE, _S_COMMIT, _S_ACK, _S_TICK, _S_PHASE, _S_CAP, _S_RATE, _S_TIMEOUT, _S_HOP, \
    _S_WORD, _S_CTUPLE, _S_BATCH, _S_WAIT, _S_TICKS, _S_SHAPE, _S_SPOUT, _S_MERGE_ENTRY = range(19)


@numba.njit(cache=True)
def _push(ht, hs, hk, ha, n, seq, t, kind, arg):
    """Push an event on the binary min-heap ordered by (time, sequence); grows the arrays when full."""
    if n == ht.shape[0]:
        ht = np.concatenate((ht, np.empty_like(ht)))
        hs = np.concatenate((hs, np.empty_like(hs)))
        hk = np.concatenate((hk, np.empty_like(hk)))
        ha = np.concatenate((ha, np.empty_like(ha)))
    i = n
    while i > 0:
        p = (i - 1) // 2
        if ht[p] < t or (ht[p] == t and hs[p] < seq):
            break
        ht[i], hs[i], hk[i], ha[i] = ht[p], hs[p], hk[p], ha[p]
        i = p
    ht[i], hs[i], hk[i], ha[i] = t, seq, kind, arg
    return ht, hs, hk, ha, n + 1


@numba.njit(cache=True)
def _pop(ht, hs, hk, ha, n):
    """Remove the heap's top (the caller read it at index 0)."""
    n -= 1
    t, s, k, a = ht[n], hs[n], hk[n], ha[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
            c += 1
        if t < ht[c] or (t == ht[c] and s < hs[c]):
            break
        ht[i], hs[i], hk[i], ha[i] = ht[c], hs[c], hk[c], ha[c]
        i = c
    ht[i], hs[i], hk[i], ha[i] = t, s, k, a
    return n


@numba.njit(cache=True)
def _append(head, tail, nxt, q, j, mask):
    """Append word j to chain q (one linked list per counter or aggregator: ``head``/``tail`` over ``nxt``, which
    holds word j at slot ``j & mask``: a ring of the words in flight, or every word with ``mask`` -1)."""
    nxt[j & mask] = -1
    if head[q] < 0:
        head[q] = j
    else:
        nxt[tail[q] & mask] = j
    tail[q] = j


@numba.njit(cache=True)
def _count(head, nxt, word_key, stamp, stamp_no, mask):
    """Words and distinct keys of the chain starting at ``head`` (``stamp`` marks keys seen with ``stamp_no``)."""
    words = 0
    distinct = 0
    j = head
    while j >= 0:
        words += 1
        k = word_key[j & mask]
        if stamp[k] != stamp_no:
            stamp[k] = stamp_no
            distinct += 1
        j = nxt[j & mask]
    return words, distinct


@numba.njit(cache=True)
def _flush_counter(w, start, counters, w_nxt, w_key, w_agg, wm, stamp, stamp_no, a_seen, per_aggregator, tuple_cost,
                   ht, hs, hk, ha, n, seq):
    """Counter ``w`` flushes at ``start`` what it served since its last flush (``CounterBolt.flush``): its
    partial counts leave, then its input tuples are acked; it is busy meanwhile. Returns the heap, the next
    sequence number and stamp."""
    c_head, c_tail, c_free, c_busy, c_tuples, c_last = counters
    head = c_head[w]
    c_head[w] = -1
    c_tail[w] = -1
    c_last[w] = start
    stamp_no += 1
    _, distinct = _count(head, w_nxt, w_key, stamp, stamp_no, wm)
    emitted = distinct
    # one tuple per aggregator its words go to (CounterBolt.emit_flushes with batches; a toolkit partial always:
    # PartialAggregate.flush)
    if per_aggregator and head >= 0:
        for a in range(a_seen.shape[0]):
            a_seen[a] = 0
        emitted = 0
        j = head
        while j >= 0:
            a = w_agg[j & wm]
            if a_seen[a] == 0:
                a_seen[a] = 1
                emitted += 1
            j = w_nxt[j & wm]
    c_free[w] = start + tuple_cost * (c_tuples[w] + emitted)
    c_busy[w] += tuple_cost * (c_tuples[w] + emitted)
    c_tuples[w] = 0
    if head >= 0:  # the partial counts leave as emitted, before the inputs' acks (CounterBolt)
        ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, start + tuple_cost * emitted, _PARTIAL, head)
        seq += 1
    return ht, hs, hk, ha, n, seq, stamp_no


#: The latency histogram's bin of a latency in ms: :mod:`keysplit.latency`'s binning, compiled (the kernel counts
#: at its finest, ``latency.BINS`` bins). Numba's cache checks only the kernel's own file: after a change to
#: ``keysplit/latency.py`` the kernel's cache (``__pycache__/kernel.*.nbi``/``.nbc``) must be removed.
_bin = numba.njit(cache=True)(latency.bin_of)


@numba.njit(cache=True, inline="always")
def _event(heap, iv, t, kind, arg):
    """Push an event at ``t`` with the next sequence number (``iv``'s heap size and sequence); returns the heap."""
    ht, hs, hk, ha = heap
    ht, hs, hk, ha, iv[_I_HEAP] = _push(ht, hs, hk, ha, iv[_I_HEAP], iv[_I_SEQ], t, kind, arg)
    iv[_I_SEQ] += 1
    return ht, hs, hk, ha


@numba.njit(cache=True, inline="always")
def _send_batch(heap, iv, batches, b, t):
    """Batch ``b`` leaves for its counter: one tuple that arrives at ``t``; the batch starts over, empty."""
    b_head, b_tail, b_count, b_gen = batches
    heap = _event(heap, iv, t, _ARRIVE, b_head[b])
    b_head[b] = -1
    b_tail[b] = -1
    b_count[b] = 0
    b_gen[b] += 1
    return heap


@numba.njit(cache=True, inline="always")
def _period(t, settings):
    """The flush period time ``t`` falls in: the counters flush at ``tick_phase + k * T`` (storm/flush_clock.py)."""
    return math.floor((t - settings[_S_PHASE]) / settings[_S_TICK])


@numba.njit(cache=True, inline="always")
def _flush(heap, iv, w, start, counters, words, stamp, a_seen, settings):
    """:func:`_flush_counter` on the loop's state."""
    ht, hs, hk, ha = heap
    ht, hs, hk, ha, iv[_I_HEAP], iv[_I_SEQ], iv[_I_STAMP] = _flush_counter(
        w, start, counters, words[4], words[2], words[1], words[4].shape[0] - 1, stamp, iv[_I_STAMP], a_seen,
        settings[_S_BATCH] > 1 or settings[_S_SHAPE] == 1, settings[_S_TUPLE], ht, hs, hk, ha, iv[_I_HEAP],
        iv[_I_SEQ])
    return ht, hs, hk, ha


@numba.njit(cache=True, inline="always")
def _on_emit(heap, iv, fv, window, now, batches, lines, words, records, n_workers, settings):
    """The spout's next call: emit the next line if the window and (open loop) its due time allow; the runner
    routes its words one after the other, into their routers' batches (or one tuple a word)."""
    b_head, b_tail, b_count, b_gen = batches
    l_left, l_emit, l_src = lines
    w_worker, w_line, w_nxt = words[0], words[3], words[4]
    rec_emit = records[0]
    lm, wm = l_left.shape[0] - 1, w_worker.shape[0] - 1
    rate, runner, word_cost, wait = settings[_S_RATE], settings[_S_RUNNER], settings[_S_WORD], settings[_S_WAIT]
    batch, hop, n_batches = int(settings[_S_BATCH]), settings[_S_HOP], b_head.shape[0]
    if iv[_I_NEXT_LINE] >= iv[_I_LINES]:
        return heap
    if iv[_I_PENDING] >= window_lines(window):
        iv[_I_WAITING] = 1
        note_full(window, now)
        return heap
    due = iv[_I_NEXT_WORD] / rate + fv[_F_LAG] if rate > 0 else 0.0  # rate: words/s, as sequence / rate
    if now < due:
        return _event(heap, iv, due, _EMIT, 0)
    if rate > 0 and window[W_CUTS] > 0 and now - due > CATCH_UP_SECS:
        fv[_F_LAG] += now - due - CATCH_UP_SECS  # the spout's token bucket (storm/spout_pacing.py)
    i = iv[_I_NEXT_LINE]
    iv[_I_NEXT_LINE] += 1
    iv[_I_PENDING] += 1
    l_emit[i & lm] = now
    if i < rec_emit.shape[0]:
        rec_emit[i] = now
    if i == 0:
        fv[_F_FIRST] = now
    # the runner routes the line's words one after the other; the spout's next call is served by the same runner
    # (the single thread of the local runner, and the cores the processes share), so the spout does not run ahead
    runner_free = max(fv[_F_RUNNER], now)
    length = l_left[i & lm]
    base = l_src[i & lm] * n_workers
    first = iv[_I_NEXT_WORD]
    for j in range(first, first + length):
        runner_free += word_cost
        w_line[j & wm] = i
        w_nxt[j & wm] = -1
        if batch <= 1:  # one tuple per word
            runner_free += runner
            heap = _event(heap, iv, runner_free + hop, _ARRIVE, j)
            continue
        b = base + w_worker[j & wm]
        _append(b_head, b_tail, w_nxt, b, j, wm)
        b_count[b] += 1
        if b_count[b] == 1:  # the batch opens: it leaves `wait` later unless it fills first
            heap = _event(heap, iv, runner_free + wait, _FLUSH, b + n_batches * b_gen[b])
        if b_count[b] >= batch:
            runner_free += runner
            heap = _send_batch(heap, iv, batches, b, runner_free + hop)
    iv[_I_NEXT_WORD] = first + length
    fv[_F_RUNNER] = runner_free
    if settings[_S_SHAPE] == 1:  # a toolkit topology: the feed spout is a process of its own, which emits ahead of
        # the stages within its window (the rows queue for the cores the stages share)
        return _event(heap, iv, now + settings[_S_SPOUT], _EMIT, 0)
    return _event(heap, iv, max(runner_free, now + settings[_S_TUPLE]), _EMIT, 0)


@numba.njit(cache=True, inline="always")
def _on_arrive(heap, iv, now, j, counters, words, stamp, a_seen, settings):
    """A tuple (a word, or a batch: a chain of words from ``j``) reaches its counter, which serves it word by word;
    the counter's own clock flushes right after it when it ends a period or more after the last flush."""
    c_head, c_tail, c_free, c_busy, c_tuples, c_last = counters
    w_nxt = words[4]
    wm = w_nxt.shape[0] - 1
    w = words[0][j & wm]
    size = 1
    last = j
    while w_nxt[last & wm] >= 0:
        last = w_nxt[last & wm]
        size += 1
    cost = size * settings[_S_SERVICE] + settings[_S_CTUPLE]
    start = max(now, c_free[w])
    c_free[w] = start + cost
    c_busy[w] += cost
    c_tuples[w] += 1
    if c_head[w] < 0:
        c_head[w] = j
    else:
        w_nxt[c_tail[w] & wm] = j
    c_tail[w] = last
    if _period(c_free[w], settings) > _period(c_last[w], settings):  # it ends past a multiple of T
        heap = _flush(heap, iv, w, c_free[w], counters, words, stamp, a_seen, settings)
    return heap


@numba.njit(cache=True, inline="always")
def _on_batch_due(heap, iv, fv, now, arg, batches, settings):
    """A batch's wait is over: it leaves unless it already left full (the event names the batch it was set for)."""
    b_head, b_gen = batches[0], batches[3]
    n_batches = b_head.shape[0]
    b = arg % n_batches
    if b_gen[b] == arg // n_batches and batches[2][b] > 0:
        fv[_F_RUNNER] = max(fv[_F_RUNNER], now) + settings[_S_RUNNER]
        heap = _send_batch(heap, iv, batches, b, fv[_F_RUNNER] + settings[_S_HOP])
    return heap


@numba.njit(cache=True, inline="always")
def _commit(heap, iv, now, a, aggregators, words, stamp, settings):
    """Aggregator ``a`` commits the partial counts it holds (``commit_us`` per distinct word) and acks them."""
    a_head, a_tail, a_free, a_last, a_busy = aggregators[0], aggregators[1], aggregators[2], aggregators[4], \
        aggregators[5]
    head = a_head[a]
    a_head[a] = -1
    a_tail[a] = -1
    if head < 0:
        return heap
    a_last[a] = max(now, a_free[a])  # a toolkit merge's clock starts at its commit (MergeAggregate.commit)
    iv[_I_STAMP] += 1
    _, distinct = _count(head, words[4], words[2], stamp, iv[_I_STAMP], words[4].shape[0] - 1)
    a_free[a] = max(now, a_free[a]) + settings[_S_COMMIT] * distinct
    a_busy[a] += settings[_S_COMMIT] * distinct
    return _event(heap, iv, a_free[a] + settings[_S_ACK], _ACK, head)


@numba.njit(cache=True, inline="always")
def _on_tick(heap, iv, now, arg, final, counters, aggregators, words, stamp, settings):
    """A multiple of T: every counter's tick, queued behind its backlog, flushes what arrived before it (an idle
    counter's timer flushes at the same instant; a busy one flushed after the tuple that ended past it too,
    :func:`_on_arrive`); every aggregator's tick commits what reached it before the tick (with ``--batch 1``; with
    batches a flush was committed as it came)."""
    n_workers = counters[0].shape[0]
    a_seen = aggregators[3]
    for w in range(n_workers):
        heap = _flush(heap, iv, w, max(now, counters[2][w]), counters, words, stamp, a_seen, settings)
    for a in range(aggregators[0].shape[0]):
        heap = _commit(heap, iv, now, a, aggregators, words, stamp, settings)
    if not final or iv[_I_COMPLETED] < iv[_I_LINES]:  # before the last chunk, some line is always still to complete
        heap = _event(heap, iv, now + settings[_S_TICK], _TICK, arg + 1)
    return heap


@numba.njit(cache=True, inline="always")
def _on_partial(heap, iv, now, head, aggregators, words, stamp, settings):
    """One counter's flush reaches the aggregators: one partial count per distinct word each, a tuple per partial
    count (``--batch 1``: held until the aggregator's tick) or one tuple per aggregator (batches: committed at once,
    ``AggregatorBolt.process``). A toolkit merge receives one tuple per partial flush and commits it at once
    (``MergeAggregate.process``); it spends
    ``_S_MERGE_ENTRY`` per entry of the flush (one per distinct key the flush sends it), as the flush arrives: a
    grouping that puts a key on several partial tasks sends the merge that key's state once from each of them. That
    time is the merge task's alone, not the serial stage's: the merge is a process of its own, and the calibration
    runs' row cost already holds what its CPU takes from the rows' processes (charging it again to the serial stage
    predicted a quiet machine's sg run a period slower than it ran: 0.83 of its rows/s)."""
    a_head, a_tail, a_free, a_seen, _, a_busy, a_entries = aggregators
    w_key, w_agg, w_nxt = words[2], words[1], words[4]
    wm = w_nxt.shape[0] - 1
    toolkit = settings[_S_SHAPE] == 1
    batched = settings[_S_BATCH] > 1 or toolkit
    iv[_I_STAMP] += 1
    stamp_no = iv[_I_STAMP]
    for a in range(a_head.shape[0]):
        a_seen[a] = 0
    j = head
    while j >= 0:
        after = w_nxt[j & wm]
        k = w_key[j & wm]
        a = w_agg[j & wm]
        if stamp[k] != stamp_no:
            stamp[k] = stamp_no
            a_seen[a] += 1
        _append(a_head, a_tail, w_nxt, a, j, wm)
        j = after
    for a in range(a_head.shape[0]):
        if a_seen[a]:
            cost = settings[_S_TUPLE] * (1 if batched else a_seen[a])
            if toolkit:
                a_entries[a] += a_seen[a]
            if toolkit:
                cost += settings[_S_MERGE_ENTRY] * a_seen[a]
            a_free[a] = max(now, a_free[a]) + cost
            a_busy[a] += cost
            if batched:
                heap = _commit(heap, iv, a_free[a], a, aggregators, words, stamp, settings)
    return heap


@numba.njit(cache=True, inline="always")
def _on_ack(heap, iv, fv, window, now, head, lines, words, histogram, records, settings):
    """An aggregator's commit is acked: a line whose last word this is completes (its latency is recorded and the
    window learns of it); a spout waiting for the window emits again."""
    l_left, l_emit = lines[0], lines[1]
    w_line, w_nxt = words[3], words[4]
    rec_done = records[1]
    lm, wm = l_left.shape[0] - 1, w_nxt.shape[0] - 1
    timeout = settings[_S_TIMEOUT]
    pending = iv[_I_PENDING]
    freed = 0
    j = head
    while j >= 0:
        i = w_line[j & wm]
        l_left[i & lm] -= 1
        if l_left[i & lm] == 0:
            latency = now - l_emit[i & lm]
            if latency > timeout:
                iv[_I_TIMEOUTS] += 1
            on_complete(window, l_emit[i & lm], now, latency > timeout, pending - freed - 1)
            if i < rec_done.shape[0]:
                rec_done[i] = now
            _record_latency(fv, histogram, latency * 1000.0)
            fv[_F_LAST] = max(fv[_F_LAST], now)
            iv[_I_COMPLETED] += 1
            freed += 1
        j = w_nxt[j & wm]
    iv[_I_PENDING] = pending - freed
    oldest = iv[_I_OLDEST]
    while oldest < iv[_I_NEXT_LINE] and l_left[oldest & lm] == 0:
        oldest += 1
    iv[_I_OLDEST] = oldest
    if freed and iv[_I_WAITING]:
        iv[_I_WAITING] = 0
        heap = _event(heap, iv, now, _EMIT, 0)
    return heap


@numba.njit(cache=True, inline="always")
def _record_latency(fv, histogram, ms):
    """A completed line's latency: its histogram bin, the sum (Neumaier's compensated sum: the mean does not drift
    over long runs), the extremes."""
    histogram[_bin(ms)] += 1
    total = fv[_F_SUM] + ms
    if abs(fv[_F_SUM]) >= abs(ms):
        fv[_F_COMP] += (fv[_F_SUM] - total) + ms
    else:
        fv[_F_COMP] += (ms - total) + fv[_F_SUM]
    fv[_F_SUM] = total
    fv[_F_MAX] = max(fv[_F_MAX], ms)
    fv[_F_MIN] = min(fv[_F_MIN], ms)


@numba.njit(cache=True)
def stream_kernel(state, heap, counters, aggregators, batches, stamp, lines, words, histogram, records, settings,
                  final):
    """The event loop (see the module docstring) over the lines fed so far, resumable. Times in seconds.

    The arguments, grouped by role (tuples of arrays, the arrays updated in place):

    - ``state``: ``(iv, fv, window)``, the loop's integer and float scalars between calls (slots ``_I_*``,
      ``_F_*``) and the spouts' window (:mod:`keysplit.topology_model.window`);
    - ``heap``: ``(time, sequence, kind, argument)`` of the pending events, a binary min-heap;
    - ``counters``: per counter, ``(head, tail, free, busy, tuples, last)``: the chain of words served since its
      last flush, when it is next free, its busy time, the input tuples since its last flush, when that flush
      began; ``aggregators``: per
      aggregator, ``(head, tail, free, seen, last, busy, entries)``: the chain of words whose partial counts reached
      it, when it is next free, a scratch count, when it last committed, its busy time, the partial-state entries it
      received (a toolkit topology's: what its merge tasks count);
    - ``batches``: per (router, counter) at ``router * workers + counter``, ``(head, tail, count, generation)``:
      the chain of words waiting in the router's batch for that counter, how many, and how many batches it sent
      (a ``_FLUSH`` event names the batch it was set for, so it does nothing once that batch has left);
    - ``stamp``: per key id, the last stamp it was counted under (distinct keys of a chain);
    - ``lines``: ``(left, emit, source)``, rings of the lines: words left to ack, emit time and router of line i at
      slot ``i & (len - 1)``; ``words``: ``(worker, aggregator, key, line, next)``, rings of the words: word j's at
      slot ``j & (len - 1)`` (the caller sizes the rings, powers of two, for the lines and words from the oldest
      line not complete to the last fed);
    - ``histogram``: a completed line's latency count per bin (:mod:`keysplit.latency`, ``latency.BINS`` bins);
      ``records``: ``(emit, done)``, each line's times when they are long enough;
    - ``settings``: float64 (slots ``_S_*``), from :class:`~keysplit.topology_model.params.TopologyParams`; the
      rate 0 means closed loop;
    - ``final``: run until every line fed is complete.

    Each kind of event has its helper (``_on_emit``, ``_on_arrive``, ``_on_batch_due``, ``_on_tick``,
    ``_on_partial``, ``_on_ack``), which reads and writes the loop's scalars in ``iv`` and ``fv``.

    Lines are numbered globally. The loop stops before the spout would emit a line that has not been fed yet
    (returns 0: feed more), or, ``final``, once every line fed is complete (returns 1), or at a tick past
    ``settings[_S_TICKS]`` (returns 2: costs that make the run longer than the model follows). Returns
    ``(status, heap)`` (the heap's arrays may have grown)."""
    iv, fv, window = state
    n_workers = counters[0].shape[0]
    a_seen = aggregators[3]
    if iv[_I_STARTED] == 0:
        iv[_I_STARTED] = 1
        heap = _event(heap, iv, 0.0, _EMIT, 0)
        heap = _event(heap, iv, settings[_S_PHASE] + settings[_S_TICK], _TICK, 1)
    status = 1
    while iv[_I_HEAP] > 0:
        ht, hs, hk, ha = heap
        if final and iv[_I_COMPLETED] >= iv[_I_LINES]:
            break
        if not final and hk[0] == _EMIT and iv[_I_NEXT_LINE] >= iv[_I_LINES]:
            status = 0  # the spout's next call needs a line not fed yet: back to the caller, the event stays
            break
        now, kind, arg = ht[0], hk[0], ha[0]
        iv[_I_HEAP] = _pop(ht, hs, hk, ha, iv[_I_HEAP])
        if kind == _EMIT:
            heap = _on_emit(heap, iv, fv, window, now, batches, lines, words, records, n_workers, settings)
        elif kind == _ARRIVE:
            heap = _on_arrive(heap, iv, now, arg, counters, words, stamp, a_seen, settings)
        elif kind == _FLUSH:
            heap = _on_batch_due(heap, iv, fv, now, arg, batches, settings)
        elif kind == _TICK:
            if arg > settings[_S_TICKS]:  # each tick visits every task: the loop's work grows with simulated time
                status = 2
                break
            heap = _on_tick(heap, iv, now, arg, final, counters, aggregators, words, stamp, settings)
        elif kind == _PARTIAL:
            heap = _on_partial(heap, iv, now, arg, aggregators, words, stamp, settings)
        else:
            heap = _on_ack(heap, iv, fv, window, now, arg, lines, words, histogram, records, settings)
    return status, heap

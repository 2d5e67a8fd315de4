"""Per-flow bbr trace of one fairness cell: one line per flow per round (diagnosis).

    BTL_PURE=1 .venv/bin/python scripts/fair/trace.py RATE_MBPS DELAY_MS QUEUE_BDP FLOWS SEED [DURATION]

Wraps ``Bbr.on_rate_sample`` (so the pure build: a compiled class cannot be wrapped) and prints,
at each round's end: the time (ms), the flow, its round count, mode and PROBE_BW phase, the
bandwidth estimate, the cap (``bw_cap``, -1: none) and its next step, the pace (Mb/s), the
min RTT, the last round's shortest RTT and srtt (ms), the window, the flight and
``inflight_hi`` (datagrams of 9000 B).  The first line is the run's figures (the sweep's
duration unless DURATION is given, warm-up a third of it)."""
import sys

from btlcore import Config
from btlcore.bench import flows as F
from btlcore.bench.regimes import GRIDS
from btlcore.protocol.congestion import bbr as B

rate, delay, queue_bdp, n, seed = (float(sys.argv[1]), float(sys.argv[2]) * 1e-3, float(sys.argv[3]),
                                   int(sys.argv[4]), int(sys.argv[5]))
path = F.PathSpec(rate, delay, 0.0, None, queue_bdp)
duration = float(sys.argv[6]) if len(sys.argv) > 6 else GRIDS["full"].duration(path)
index: dict[int, int] = {}
open_flows = F._open


def _open(*a, **k):  # type: ignore[no-untyped-def]
    flows, dead = open_flows(*a, **k)
    index.update((id(f.peer), f.index) for f in flows)
    return flows, dead


F._open = _open
rows = []
on_rate_sample = B.Bbr.on_rate_sample


def traced(self, peer, s):  # type: ignore[no-untyped-def]
    st = peer.cc_state
    before = st.rounds
    on_rate_sample(self, peer, s)
    if st.rounds != before and id(peer) in index:
        rows.append((s.now, index[id(peer)], st.rounds, B.MODE_NAMES[st.mode], st.cycle, st.bw, st.bw_cap,
                     st.cap_step, peer.pacing_rate, st.min_rtt, st.prev_round_min_rtt, peer.timer.srtt,
                     st.cwnd_bytes, s.in_flight, st.inflight_hi))


B.Bbr.on_rate_sample = traced
r = F.run_flows(path, [Config()] * n, duration, duration / 3, seed=seed)
print(f"jain {r['jain']:.3f} goodput {r['goodput_frac']:.3f} shares {[round(x, 3) for x in r['shares']]} "
      f"resent {r['resend_frac']:.3f} duration {duration:.3f}")


def mbps(x: float) -> float:
    return -1.0 if x == float("inf") else x * 8 / 1e6


def ms(x: float) -> float:
    return -1.0 if x == float("inf") else x * 1e3


def dg(x: float) -> float:
    return -1.0 if x == float("inf") else x / 9000


for t, i, rd, mode, cyc, bw, cap, step, pace, mr, pmr, srtt, cwnd, infl, hi in rows:
    print(f"{t * 1e3:8.1f} f{i} r{rd:3d} {mode:9s} c{cyc} bw {mbps(bw):6.1f} cap {mbps(cap):6.1f} step {step:5.3g} "
          f"pace {mbps(pace):6.1f} minrtt {ms(mr):5.2f} rmin {ms(pmr):5.2f} srtt {ms(srtt):5.2f} "
          f"cwnd {dg(cwnd):5.1f} infl {dg(infl):5.1f} hi {dg(hi):6.1f}")

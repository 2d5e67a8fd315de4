"""btlcore's benchmarks: btlcore side by side with what users would pick instead.

Installed with btlcore: ``btl bench`` (or ``python -m btlcore.bench``) calls
:func:`btlcore.bench.runner.main` (argv); code calls :func:`btlcore.bench.runner.run` (a dict).

Layout, one concept per module:

* ``harness``    trials and their statistics, two pinned processes on loopback, time bounds
* ``profiles``   how long and how often each measurement runs (tiny / quick / full)
* ``ref_udp``    raw UDP: one-way blast, ping-pong (blocking and busy-poll)
* ``ref_tcp``    kernel TCP: stream, TCP_NODELAY ping-pong (blocking and busy-poll)
* ``ref_quic``   aioquic: one-stream bulk, 64 B echo
* ``btl_adapter`` every call into btlcore's public API, in one place
* ``btl_udp``    btlcore over the UDP backend: bulk goodput, round trip
* ``btl_sim``    btlcore on the simulator: segment rate, efficiency under loss
* ``btl_scale``  memory per idle peer, progress cost against peer count
* ``report``     ratios, targets, the table and the JSON
* ``docs``       docs/benchmarks.md and the goodput-vs-loss plot
* ``runner``     the entry point
"""

"""Tools that hook into a transport (statistics, pcap tracing, fault scripts)."""

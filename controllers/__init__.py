"""SDN controller apps for the emulated fabric, written against the Ryu API (run under os-ken)."""

"""The emulated fabric: its model (topo), Mininet + Open vSwitch bring-up (network), the controller process, the hosts' backends."""

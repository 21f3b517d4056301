"""pjrt-hub: load, check and test PJRT device plugins."""

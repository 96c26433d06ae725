"""Real models, sharded SimpleFSDP-style, trained compiled with and without a bucketing pass."""

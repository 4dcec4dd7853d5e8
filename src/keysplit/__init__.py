"""keysplit: skew-aware stream groupings for Apache Storm, a simulator and a Spark replay."""

__version__ = "0.1.0"

"""The PySpark replay of keysplit: the same dataset, the same Grouping classes, at Spark scale."""

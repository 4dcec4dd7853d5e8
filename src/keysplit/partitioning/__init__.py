"""Gedik's partitioning functions (VLDB J. 2014): construction, adaptation and their metrics.

A regular package (not a namespace package): the replay ships keysplit to Spark executors as a zip, and
zipimport cannot find a namespace package inside one.
"""

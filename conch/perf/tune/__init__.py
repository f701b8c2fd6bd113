"""`conch tune`: settings per step (instances, dynamic batching, backend threads) for one ensemble or several
sharing one endpoint, found by a guided search on the real server under a p99 target, and written back as a
patch to the declaration."""

"""Performance on the real server: Locust load runs (`conch bench`), profiles, the guided search of `conch tune`
and the models-per-instance probe."""

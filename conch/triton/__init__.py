"""The local tritonserver and the clients that talk to it: the server process, the MME and KServe routes, the sync
HTTP client, the Python backend's shared-memory regions."""

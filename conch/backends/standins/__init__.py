"""Runners that Python-backend stand-ins copy into the model folder; they never import conch."""

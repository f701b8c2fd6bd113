"""Replaying an archive's samples on a real Triton: the replay itself, payload recording and JUnit XML."""

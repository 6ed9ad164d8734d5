"""Real multi-process tests of the fused sync: 2 gloo ranks on 127.0.0.1, spawned once per test module."""

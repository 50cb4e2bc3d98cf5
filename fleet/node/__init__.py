"""What runs on every node: the agent (ZeroMQ), the zygote (fork server) and the
set-up a step child performs before running its step."""

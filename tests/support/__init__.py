"""What the tests share: workflows, fixtures' helpers, servers' and hosts' harnesses."""

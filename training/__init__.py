"""The off-policy training loop and what surrounds it: seeding, logging, config checks."""

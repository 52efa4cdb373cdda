"""Environment construction: gymnasium envs, seeded, with episode statistics."""

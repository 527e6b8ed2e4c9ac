"""The shared training engine: trainer loop, optimisers and schedules, checkpoint IO, logging, distributed."""

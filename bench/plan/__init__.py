"""What a run is planned from, below the claims' questions and the engine that runs them: the sweep (sweep: every
kind's axes together, the shape of `bench run`'s options and of a profile) and the cost model (cost: each case's
predicted seconds, from the run's calibration), which the planner budgets with and the layer claim's question reads.
"""

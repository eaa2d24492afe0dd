"""A/B regression checks: a git revision and the working tree measured alternately on one machine.

git.py checks the revision out in a temporary worktree; side.py runs one worker process per side (worker.py, with
PYTHONPATH set to that side's tree, so it imports that revision's code); engine.py interleaves the cases' slices in
randomised ABBA blocks, rounds.py reduces both sides' slices to the rounds compared, and each side becomes a run
document for bench.regress.compare.
"""

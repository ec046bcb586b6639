"""The one job runtime under ``vp-gen`` and ``vp-rollout``: blocks of trajectories, executors, part files.

- ``vpintegrator.jobs.shards``: shard ``I/N`` of a selection (contiguous blocks of whole chunks), the
  shard files beside an output and their index, checked to form one whole set, for any file kind (a
  ``ShardKind`` says how its files are read); the index written once every shard exists.
- ``vpintegrator.jobs.executors``: where blocks run: inline, on threads (``run_chunks``, in order), on
  worker processes that die with their parent (``in_processes``), or on a ``dask.distributed`` cluster
  (``vpintegrator.jobs.dask``: one task per shard, a lost cluster one line).

The file kinds themselves are written by one module each: trajectory files by ``vpintegrator.data.trajectory_files``
(their shard index by ``vpintegrator.data.shards``), rollout files by ``vpintegrator.data.rollouts``
(their shard index and part files by ``vpintegrator.data.rollout_shards``). This package sits below
``data`` and ``rollout`` (it imports only the root helpers), so both commands run on it without a circle.
"""

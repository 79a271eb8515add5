"""Time: schedule timing, slots, windows, run keys and artifact names, previews and the
start decisions (late start, paused company, missed slots). Pure functions; ``now`` is passed in."""

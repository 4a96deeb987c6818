"""What a run shows: the results and --print selection (results.py), the formats (printer.py), the action script
(script.py) and saved pairs read back (pairs.py)."""

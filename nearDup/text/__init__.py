"""Documents to text: finding inputs (inputs.py), reading and decoding them (read.py), extracting the text of
other formats (extract.py), normalising it (normalise.py) and cutting it into shingle hashes (shingles.py).
"""

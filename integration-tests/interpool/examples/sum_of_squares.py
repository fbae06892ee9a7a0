import numpy as np
from concurrent.futures import InterpreterPoolExecutor   # or: from interpool import ...

def sum_of_squares(chunk):
    import numpy
    return float(numpy.dot(chunk, chunk))

if __name__ == "__main__":
    data = np.random.default_rng(0).standard_normal(40_000_000)   # 320 MB
    with InterpreterPoolExecutor(max_workers=4) as pool:
        # Each chunk is a view of `data`: the workers read it in place.
        parts = pool.map(sum_of_squares, np.array_split(data, 4))
        print(sum(parts), float(data @ data))

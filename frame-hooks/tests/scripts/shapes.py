"""A small program for the breakpoint example."""


class Shape:
    def __init__(self, name, *sides, scale=1, **tags):
        self.name = name
        self.sides = [s * scale for s in sides]
        self.tags = tags

    def perimeter(self):
        return sum(self.sides)


def build(kind, n):
    if kind == "square":
        return Shape("square", *([n] * 4), colour="red")
    return Shape(kind, n, n + 1, n + 2, scale=2)


for kind, n in (("square", 2), ("triangle", 3)):
    shape = build(kind, n)
    print(shape.name, "perimeter", shape.perimeter())

"""The byte comparison every conformance verdict rests on."""

import torch

from conformance.harness import first_difference


def test_equal_values_with_other_bytes_differ():
    # 0.0 == -0.0, but their bytes differ: a bitwise check must see it.
    assert first_difference([torch.tensor([0.0])], [torch.tensor([-0.0])]) == (0, 3, "byte 3: expected 0, got 128")
    a = torch.tensor([1.0, 2.0])
    assert first_difference([a], [a.clone()]) is None
    b = a.clone()
    b[1] = torch.nextafter(b[1], torch.tensor(3.0))
    assert first_difference([a], [b])[:2] == (0, 4)


def test_a_missing_gradient_must_be_missing_on_both_sides():
    g = torch.ones(2)
    assert first_difference([None, g], [None, g.clone()]) is None
    assert first_difference([None], [g]) == (0, -1, "no tensor expected, a tensor produced")
    assert first_difference([g], [None]) == (0, -1, "a tensor expected, none produced")

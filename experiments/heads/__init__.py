"""Feature heads (EAGLE style) trained for a target: data, training, evaluation."""

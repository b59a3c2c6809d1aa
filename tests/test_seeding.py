"""bt.manual_seed(s) makes a whole run reproducible, written as a user would write the run."""
import pytest

import burtorch as bt
from burtorch import data
from burtorch.cli.trainer import train
from burtorch.nn import MLP, MakemoreMLP
from burtorch.optim import SGD

WORDS = ["anna", "bob", "carla", "dave", "emma", "fred", "gina", "hank", "ivy", "jon"] * 5


def a_users_run(seed):
    """Everything random takes its default seed: the split, the initialisation, the sampler."""
    bt.manual_seed(seed)
    mlp = MLP(3, [4, 1])
    train_words, val_words = data.split(WORDS, 0.2)
    model = MakemoreMLP(vocab=data.WordDataset(WORDS, 3).vocab_size, block=3, emb=4, hidden=8)
    train_set = data.WordDataset(train_words, 3)
    val_set = data.WordDataset(val_words, 3)
    history = train(model, SGD(model.parameters(), lr=0.1), train_set, val_set.batch(20), steps=30, batch=4,
                    eval_every=10)
    return ([p.data for p in mlp.parameters()], [p.data for p in model.parameters()], history.train_loss,
            history.val_loss, train_words)


def test_manual_seed_makes_a_run_reproducible():
    first = a_users_run(0)
    second = a_users_run(0)
    assert first == second  # bitwise: parameters, losses, the split
    other = a_users_run(1)
    assert other[0] != first[0] and other[1] != first[1] and other[2] != first[2]


def test_explicit_seeds_bypass_the_stream():
    bt.manual_seed(5)
    a = data.WordDataset(WORDS, 3, seed=42).batch(8)
    bt.manual_seed(6)
    b = data.WordDataset(WORDS, 3, seed=42).batch(8)
    assert a == b
    with pytest.raises(ValueError):
        data.WordDataset(WORDS, 3).batch(0)
    with pytest.raises(TypeError):
        bt.manual_seed("0")

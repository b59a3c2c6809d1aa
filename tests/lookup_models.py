"""MakemoreMLP with its lookup and first layer as two records (the embedding's rows, then
``linear``): the form a user's own model takes, which compiled replays on several threads pair
into one op (the lookup's rows read by that layer alone)."""
from burtorch import _core, nn


class TwoRecordMLP(nn.MakemoreMLP):
    def loss_batch(self, samples):
        ids = [i for ctx, _ in samples for i in ctx]
        x = self.embed(ids).reshape(len(samples), self.block * self.emb_dim)
        return _core.cross_entropy(self.fc2(self.fc1(x).tanh()), [t for _, t in samples])

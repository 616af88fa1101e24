"""Special token ids, fixed here for every sentencepiece model mtkit trains, and nowhere else."""

PAD_ID = 0  # padding; never a target, masked out of attention and loss
UNK_ID = 1  # sentencepiece's unknown piece
BOS_ID = 2  # starts every decoder input
EOS_ID = 3  # ends every source and every target

# pipelines/common.mk: pattern rules for one translation experiment, from raw text to scores:
#   raw text -> vocab -> ids -> batches -> checkpoint(s) -> averaged checkpoint -> hypotheses -> scores
# With several SEEDS, one model per seed, trained side by side, translates as an ensemble.
# An experiment's Makefile sets the variables below (all have defaults) and includes this file.
# Outputs go to $(OUT); every step is an ordinary make target, so a change of one variable
# (say BEAM) reruns only what depends on it when you remove the target.

TOP        := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BIN        ?= $(TOP)/bin
DATA       ?= $(TOP)/data/multi30k
BACKEND    ?= cpu
SRC        ?= en
TGT        ?= de
TRAIN      ?= train
VALID      ?= val
TEST       ?= test_2016_flickr
SUFFIX     ?=
VARIANT    ?= raw
OUT        ?= out/$(VARIANT)
# subword vocabulary and batches
VOCAB_SIZE ?= 8000
NORMALIZE  ?= nfkc
MAX_TOKENS ?= 4096
SEED       ?= 1
# BPE-dropout on the training data: BPE_COPIES segmentations of every training pair, each merge
# skipped with probability BPE_DROPOUT (0, the default: one deterministic segmentation)
BPE_DROPOUT ?= 0
BPE_COPIES ?= 20
# training
MODEL      ?= --preset small
TRAIN_OPTS ?=
STOP       ?= --max-time 10m
# training seeds: one (the default, SEED) gives one model in $(OUT); several give one model per seed
# in $(OUT)/seed-S/, trained at the same time with an equal share of the cores each, whose averaged
# checkpoints nmt-decode uses together as an ensemble (the mean of their probabilities)
SEEDS      ?= $(SEED)
SAVE_EVERY ?= 200
AVG        ?= 5
VALID_EVERY ?= 200
# validation: VALID_BLEU=--valid-bleu also scores greedy translations of the validation set
VALID_BLEU ?=
# decoding and scoring
BEAM       ?= 4
ALPHA      ?= 0.6
DECODE_OPTS ?=
BLEU_OPTS  ?=

NMT_ENV := PATH="$(BIN):$$PATH"

.DELETE_ON_ERROR:
.SECONDARY:

$(OUT)/.dir:
	mkdir -p $(OUT) && touch $@

# plain text of each split and side
$(OUT)/%.$(SRC): $(DATA)/%$(SUFFIX).$(SRC).gz | $(OUT)/.dir
	zcat $< > $@
$(OUT)/%.$(TGT): $(DATA)/%$(SUFFIX).$(TGT).gz | $(OUT)/.dir
	zcat $< > $@

# joint BPE vocabulary learned on the training text of both languages
$(OUT)/vocab.bpe: $(OUT)/$(TRAIN).$(SRC) $(OUT)/$(TRAIN).$(TGT)
	$(NMT_ENV) nmt-tokenize -N $(NORMALIZE) --src $(word 1,$^) --tgt $(word 2,$^) | \
	    $(NMT_ENV) nmt-vocab --size $(VOCAB_SIZE) -o $@

# id pairs of a split
$(OUT)/%.ids: $(OUT)/%.$(SRC) $(OUT)/%.$(TGT) $(OUT)/vocab.bpe
	$(NMT_ENV) nmt-tokenize --vocab $(OUT)/vocab.bpe --src $(word 1,$^) --tgt $(word 2,$^) -o $@

# token-budget batches
$(OUT)/%.batches: $(OUT)/%.ids
	$(NMT_ENV) nmt-batch --max-tokens $(MAX_TOKENS) --seed $(SEED) -i $< -o $@

ifneq ($(BPE_DROPOUT),0)
# with BPE-dropout, the training ids hold BPE_COPIES differently segmented copies of the training
# text (nmt-tokenize reseeds per line), batched in one window so that the copies of a pair spread
# over the whole of the batches
$(OUT)/$(TRAIN).ids: $(OUT)/$(TRAIN).$(SRC) $(OUT)/$(TRAIN).$(TGT) $(OUT)/vocab.bpe
	for i in $$(seq $(BPE_COPIES)); do cat $(word 1,$^); done > $@.$(SRC).tmp
	for i in $$(seq $(BPE_COPIES)); do cat $(word 2,$^); done > $@.$(TGT).tmp
	$(NMT_ENV) nmt-tokenize --vocab $(OUT)/vocab.bpe --dropout $(BPE_DROPOUT) --seed $(SEED) \
	    --src $@.$(SRC).tmp --tgt $@.$(TGT).tmp -o $@; s=$$?; rm -f $@.$(SRC).tmp $@.$(TGT).tmp; exit $$s
$(OUT)/$(TRAIN).batches: $(OUT)/$(TRAIN).ids
	$(NMT_ENV) nmt-batch --max-tokens $(MAX_TOKENS) --seed $(SEED) --window 100000000 -i $< -o $@
endif

# training (--force: make decided the checkpoint is out of date); periodic checkpoints
# model.ckpt.step-N are kept for averaging; model.ckpt.best is the
# one with the lowest validation loss
$(OUT)/model.ckpt: $(OUT)/$(TRAIN).batches $(OUT)/$(VALID).batches $(OUT)/vocab.bpe
	$(NMT_ENV) nmt-train --backend $(BACKEND) -i $(word 1,$^) --valid $(word 2,$^) --vocab $(OUT)/vocab.bpe \
	    -o $@ --force $(MODEL) $(TRAIN_OPTS) $(STOP) --seed $(SEED) --valid-every $(VALID_EVERY) $(VALID_BLEU) \
	    --save-every $(SAVE_EVERY) --keep $(AVG) --log $(OUT)/train.csv

# the average of the last AVG periodic checkpoints, as in the paper; a run stopped before its
# first periodic checkpoint (a short --max-time, a signal) averages what it has: the final one
LAST_CKPTS = $$(ls $(1).step-* 2>/dev/null | sort -t- -k2 -n | tail -n $(AVG) | grep . || echo $(1))
$(OUT)/model.avg.ckpt: $(OUT)/model.ckpt
	$(NMT_ENV) nmt-avg -o $@ $(call LAST_CKPTS,$(OUT)/model.ckpt)

ifneq ($(word 2,$(SEEDS)),)
# an ensemble: every seed's model trained at the same time (whatever make's -j), each with its
# share of the cores (TRAIN_OPTS may set --threads); each training's output goes to its train.log
MEMBERS := $(foreach s,$(SEEDS),$(OUT)/seed-$(s)/model.avg.ckpt)
$(OUT)/ensemble.trained: $(OUT)/$(TRAIN).batches $(OUT)/$(VALID).batches $(OUT)/vocab.bpe
	n=$(words $(SEEDS)); t=$$(( $$(nproc) / n )); [ $$t -ge 1 ] || t=1; pids=; \
	for s in $(SEEDS); do mkdir -p $(OUT)/seed-$$s || exit 1; \
	    $(NMT_ENV) nmt-train --backend $(BACKEND) -i $(word 1,$^) --valid $(word 2,$^) --vocab $(OUT)/vocab.bpe \
	        -o $(OUT)/seed-$$s/model.ckpt --force --threads $$t $(MODEL) $(TRAIN_OPTS) $(STOP) --seed $$s \
	        --valid-every $(VALID_EVERY) $(VALID_BLEU) --save-every $(SAVE_EVERY) --keep $(AVG) \
	        --log $(OUT)/seed-$$s/train.csv > $(OUT)/seed-$$s/train.log 2>&1 & pids="$$pids $$!"; done; \
	rc=0; for p in $$pids; do wait $$p || rc=1; done; \
	for s in $(SEEDS); do echo "== seed $$s:"; tail -n 2 $(OUT)/seed-$$s/train.log; done; exit $$rc
	touch $@
$(OUT)/seed-%/model.avg.ckpt: $(OUT)/ensemble.trained
	$(NMT_ENV) nmt-avg -o $@ $(call LAST_CKPTS,$(OUT)/seed-$*/model.ckpt)
else
MEMBERS := $(OUT)/model.avg.ckpt
endif

# translations of a split's source side, by the averaged model or the ensemble of them
$(OUT)/%.hyp: $(OUT)/%.$(SRC) $(MEMBERS)
	$(NMT_ENV) nmt-decode --backend $(BACKEND) $(foreach m,$(MEMBERS),-m $(m)) --beam $(BEAM) --alpha $(ALPHA) \
	    $(DECODE_OPTS) < $< > $@

# scores: sacreBLEU-identical BLEU and chrF, with their signatures
$(OUT)/%.scores: $(OUT)/%.hyp $(OUT)/%.$(TGT)
	$(NMT_ENV) nmt-bleu $(OUT)/$*.$(TGT) -i $< -m bleu chrf $(BLEU_OPTS) -f text > $@

# pictures of training: the curves of the training logs (of every seed), drawn from what they hold
# so far (also while training runs)
LOGS := $(if $(word 2,$(SEEDS)),$(foreach s,$(SEEDS),$(OUT)/seed-$(s)/train.csv),$(OUT)/train.csv)
plot:
	@$(TOP)/pipelines/plot.sh $(OUT)/train.svg $(LOGS) > /dev/null && echo "== training curves: $(OUT)/train.svg"

.PHONY: vocab batches texts train avg translate score plot clean
vocab: $(OUT)/vocab.bpe
texts: $(foreach s,$(VALID) $(TEST),$(OUT)/$(s).$(SRC) $(OUT)/$(s).$(TGT))
batches: $(OUT)/$(TRAIN).batches $(OUT)/$(VALID).batches
train: $(if $(word 2,$(SEEDS)),$(OUT)/ensemble.trained,$(OUT)/model.ckpt)
avg: $(MEMBERS)
translate: $(OUT)/$(TEST).hyp $(OUT)/$(VALID).hyp
score: $(OUT)/$(TEST).scores $(OUT)/$(VALID).scores
	@echo "== $(VARIANT): validation ($(VALID))"; cat $(OUT)/$(VALID).scores
	@echo "== $(VARIANT): test ($(TEST))"; cat $(OUT)/$(TEST).scores
clean:
	rm -rf $(OUT)

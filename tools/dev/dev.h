/*
 * recur-dev: the development commands, apart from the user's `recur` because they reach
 * under the public API (the GGUF writer, the vocabulary reader). `recur mkmodel` and
 * `recur setmeta` run them through recur-dev beside the recur program. Each command takes the
 * arguments after its name and returns an exit status of tools.h.
 */
#ifndef RECUR_DEV_H
#define RECUR_DEV_H

/* mkmodel: writes a random-weight model in llama.cpp's GGUF layout (mkmodel.c and its
 * architecture families, mk_*.c). */
int cmd_mkmodel(int argc, char **argv);
/* setmeta: a GGUF file with string key-values set, tensors copied (setmeta.c). */
int cmd_setmeta(int argc, char **argv);

#endif /* RECUR_DEV_H */

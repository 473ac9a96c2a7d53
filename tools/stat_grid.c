/* The column-aligned text tables of `sdpshim stat` (struct grid, tools/stat.h):
 * rows of fixed-size cells, each column as wide as its widest cell, numbers
 * right-aligned, no trailing blanks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/stat.h"

void grid_init(struct grid *g, size_t ncols, const char *const *title, const bool *right)
{
	memset(g, 0, sizeof(*g));
	g->ncols = ncols;
	g->title = title;
	g->right = right;
}

char *grid_add_row(struct grid *g)
{
	size_t row_size = g->ncols * CELL_MAX;
	char *row;

	if (g->nrows == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 64;
		char *cells = realloc(g->cells, cap * row_size);

		if (!cells)
			return NULL;
		g->cells = cells;
		g->cap = cap;
	}
	row = g->cells + g->nrows++ * row_size;
	memset(row, 0, row_size);
	return row;
}

char *grid_cell(char *row, size_t col)
{
	return row + col * CELL_MAX;
}

/* Empty cells at the end of a row leave no trailing blanks. */
static void grid_print_row(const struct grid *g, const char *const *cell, const int *width)
{
	size_t last = g->ncols;

	while (last > 1 && !cell[last - 1][0])
		last--;
	for (size_t c = 0; c < last; c++) {
		const char *sep = c + 1 < last ? "  " : "\n";

		if (c + 1 == last && !g->right[c])
			printf("%s%s", cell[c], sep);
		else
			printf(g->right[c] ? "%*s%s" : "%-*s%s", width[c], cell[c], sep);
	}
}

void grid_print(const struct grid *g)
{
	const char **cell = calloc(g->ncols, sizeof(*cell));
	int *width = calloc(g->ncols, sizeof(*width));

	if (!cell || !width)
		goto out;
	for (size_t c = 0; c < g->ncols; c++) {
		width[c] = (int)strlen(g->title[c]);
		for (size_t r = 0; r < g->nrows; r++) {
			int w = (int)strlen(g->cells + (r * g->ncols + c) * CELL_MAX);
			if (w > width[c])
				width[c] = w;
		}
	}
	grid_print_row(g, g->title, width);
	for (size_t r = 0; r < g->nrows; r++) {
		for (size_t c = 0; c < g->ncols; c++)
			cell[c] = g->cells + (r * g->ncols + c) * CELL_MAX;
		grid_print_row(g, cell, width);
	}
out:
	free(cell);
	free(width);
}

void grid_free(struct grid *g)
{
	free(g->cells);
	memset(g, 0, sizeof(*g));
}


/* libFuzzer harness for core/uevent.c: uevent_is_rdma_removal and
 * uevent_is_rdma_addition, whether a kernel uevent names an RDMA device's
 * (or its verbs file's) removal or addition.
 *
 * Input: the message bytes as recv() returned them.
 *
 * Checked: the verdict is the model's below (the bytes cut at every NUL
 * into fields, the last one ending at the end; true exactly when one field
 * is "ACTION=remove" and one is "SUBSYSTEM=infiniband" or
 * "SUBSYSTEM=infiniband_verbs"; the same with "ACTION=add"), read from a buffer of exactly the input's
 * size so ASan sees any read past it; appending a NUL changes nothing;
 * NULL is false. */
#include "core/uevent.h"
#include "tests/fuzz/fuzz.h"

static bool model_field_is(const uint8_t *f, size_t n, const char *want)
{
	size_t i;

	for (i = 0; i < n && want[i] && f[i] == (uint8_t)want[i]; i++)
		;
	return i == n && want[i] == '\0';
}

static bool model(const uint8_t *data, size_t size, const char *action)
{
	bool removal = false, rdma = false;
	size_t start = 0;

	for (size_t i = 0; i <= size; i++) {
		if (i < size && data[i] != 0)
			continue;
		if (i > start || i < size) {
			removal |= model_field_is(data + start, i - start, action);
			rdma |= model_field_is(data + start, i - start, "SUBSYSTEM=infiniband") ||
				model_field_is(data + start, i - start, "SUBSYSTEM=infiniband_verbs");
		}
		start = i + 1;
	}
	return removal && rdma;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *exact = malloc(size ? size : 1);
	char *longer = malloc(size + 1);
	bool verdict;

	CHECK(exact && longer);
	memcpy(exact, data, size);
	memcpy(longer, data, size);
	longer[size] = '\0';
	verdict = uevent_is_rdma_removal(exact, size);
	CHECK(verdict == model(data, size, "ACTION=remove"));
	CHECK(uevent_is_rdma_removal(longer, size + 1) == verdict);
	CHECK(!uevent_is_rdma_removal(NULL, size));
	verdict = uevent_is_rdma_addition(exact, size);
	CHECK(verdict == model(data, size, "ACTION=add"));
	CHECK(uevent_is_rdma_addition(longer, size + 1) == verdict);
	CHECK(!uevent_is_rdma_addition(NULL, size));
	free(exact);
	free(longer);
	return 0;
}

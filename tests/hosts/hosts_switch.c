/*
 * hosts_switch: the switch of tests/hosts/hosts.sh when links need a delay.
 * This machine's kernel has no netem (tc's delay), so the delay is made
 * here, in user space: each host's eth0 is a TUN device created by this
 * program inside the host's network namespace, and every IPv4 packet a host
 * sends is read here and written to the host its destination address names,
 * no sooner than
 *
 *   - the sender's link has carried it: a host's packets leave one after
 *     another at RATE (the link is busy until the last one is through),
 *   - the receiver's link has carried it: likewise, shared by every sender,
 *   - DELAY later: the one-way latency between two hosts.
 *
 * A packet that would wait more than 100 ms at either link is dropped, as
 * tbf's queue of 100 ms does on the veth links: TCP slows down to the rate.
 * Packets are as large as the device's MTU (hosts.sh sets 65000, the size
 * of veth's GSO packets: at 1500 bytes a user-space switch could not carry
 * 10 Gbit/s on this machine's cores).
 *
 *   hosts_switch --net A.B.C.0 [--delay US] [--rate BITS_PER_S] NETNS...
 *
 * Host i (from 0) is at A.B.C.(i+1); its namespace is the i-th NETNS, a name
 * of `ip netns` (/run/netns/NETNS). Prints "ready" on stdout once every
 * device exists (the caller then gives them addresses), then forwards until
 * SIGTERM or SIGINT, or until its parent exits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setns, ppoll */
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_HOSTS 8
#define MAX_PACKET 65536
/* the longest a packet waits at a link before it is dropped */
#define QUEUE_NS 100000000LL

/* One packet on its way to a host. */
struct packet {
	struct packet *next; /* the next packet to the same host, due no sooner */
	int64_t due;         /* CLOCK_MONOTONIC ns when it is written to the host */
	size_t len;          /* bytes of data */
	unsigned char data[]; /* the IPv4 packet as the sender's device gave it */
};

/* A host: its device and its link's state. */
struct host {
	int fd;               /* the TUN device (eth0 in the host's namespace) */
	int64_t tx_free;      /* when the host's link has sent all it was given */
	int64_t rx_free;      /* when the link has delivered all sent to the host */
	struct packet *head;  /* packets to the host in order of due time */
	struct packet *tail;  /* the last of them (appends) */
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The TUN device eth0 inside namespace NAME (this process stays in its own). */
static int make_device(const char *name)
{
	char path[256];
	int self = -1, ns = -1, fd = -1;
	struct ifreq ifr;

	snprintf(path, sizeof path, "/run/netns/%s", name);
	self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	ns = open(path, O_RDONLY | O_CLOEXEC);
	if (self < 0 || ns < 0) {
		fprintf(stderr, "hosts_switch: cannot open %s: %s\n", self < 0 ? "/proc/self/ns/net" : path, strerror(errno));
		goto out;
	}
	if (setns(ns, CLONE_NEWNET) != 0) {
		fprintf(stderr, "hosts_switch: cannot enter namespace %s: %s\n", name, strerror(errno));
		goto out;
	}
	/* the device belongs to the namespace the file is opened in */
	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	memset(&ifr, 0, sizeof ifr);
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
	strcpy(ifr.ifr_name, "eth0");
	if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
		fprintf(stderr, "hosts_switch: cannot create a TUN device in %s: %s\n", name, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (setns(self, CLONE_NEWNET) != 0) {
		fprintf(stderr, "hosts_switch: cannot return to its own namespace: %s\n", strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
out:
	if (self >= 0)
		close(self);
	if (ns >= 0)
		close(ns);
	return fd;
}

/* Nanoseconds LEN bytes take on a link of RATE bits per second (0: none). */
static int64_t wire_ns(size_t len, double rate)
{
	return rate > 0 ? (int64_t)((double)len * 8e9 / rate) : 0;
}

/* Takes a packet from host S: queues it for its destination or drops it. */
static void take(struct host *hosts, int n, int s, const unsigned char *buf, size_t len, uint32_t net,
		 int64_t delay, double rate, int64_t now)
{
	struct host *src = &hosts[s], *dst;
	struct packet *p;
	uint32_t addr;
	int64_t sent, arrived;
	int d;

	if (len < 20 || buf[0] >> 4 != 4)
		return; /* only IPv4 (the kernel's IPv6 chatter goes nowhere) */
	addr = (uint32_t)buf[16] << 24 | (uint32_t)buf[17] << 16 | (uint32_t)buf[18] << 8 | buf[19];
	d = (int)(addr - net) - 1;
	if ((addr & 0xffffff00u) != net || d < 0 || d >= n || d == s)
		return;
	dst = &hosts[d];
	sent = (src->tx_free > now ? src->tx_free : now) + wire_ns(len, rate);
	if (sent - now > QUEUE_NS)
		return;
	src->tx_free = sent;
	arrived = (dst->rx_free > sent ? dst->rx_free : sent) + wire_ns(len, rate);
	if (arrived - sent > QUEUE_NS)
		return;
	p = malloc(sizeof *p + len);
	if (!p)
		return; /* a lost packet: TCP sends it again */
	dst->rx_free = arrived;
	p->next = NULL;
	p->due = arrived + delay;
	p->len = len;
	memcpy(p->data, buf, len);
	/* due times to one host only grow: rx_free and the clock do */
	if (dst->tail)
		dst->tail->next = p;
	else
		dst->head = p;
	dst->tail = p;
}

static int usage(void)
{
	fprintf(stderr, "usage: hosts_switch --net A.B.C.0 [--delay US] [--rate BITS_PER_S] NETNS...\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct host hosts[MAX_HOSTS];
	struct pollfd fds[MAX_HOSTS];
	static unsigned char buf[MAX_PACKET];
	unsigned a, b, c, z;
	uint32_t net = 0;
	int64_t delay = 0;
	double rate = 0;
	int n = 0, i, k, rc = 1;
	struct sigaction sa;
	sigset_t block, none;

	memset(hosts, 0, sizeof hosts);
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--net") && i + 1 < argc) {
			if (sscanf(argv[++i], "%u.%u.%u.%u", &a, &b, &c, &z) != 4 || a > 255 || b > 255 || c > 255 || z != 0) {
				fprintf(stderr, "hosts_switch: --net must be like 10.77.0.0, not '%s'\n", argv[i]);
				return 2;
			}
			net = a << 24 | b << 16 | c << 8;
		} else if (!strcmp(argv[i], "--delay") && i + 1 < argc) {
			char *end;
			double us = strtod(argv[++i], &end);
			if (*end || !(us >= 0 && us <= 1e6)) {
				fprintf(stderr, "hosts_switch: --delay must be microseconds 0 to 1e6, not '%s'\n", argv[i]);
				return 2;
			}
			delay = (int64_t)(us * 1000);
		} else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
			char *end;
			rate = strtod(argv[++i], &end);
			if (*end || !(rate >= 1e3 && rate <= 1e12)) {
				fprintf(stderr, "hosts_switch: --rate must be bits per second 1e3 to 1e12, not '%s'\n", argv[i]);
				return 2;
			}
		} else if (argv[i][0] == '-') {
			return usage();
		} else if (n == MAX_HOSTS) {
			fprintf(stderr, "hosts_switch: at most %d hosts\n", MAX_HOSTS);
			return 2;
		} else {
			hosts[n++].fd = -1;
			hosts[n - 1].fd = make_device(argv[i]);
			if (hosts[n - 1].fd < 0)
				goto out;
		}
	}
	if (n < 2 || !net)
		return usage();

	/* the signals arrive only while waiting (ppoll): no half-done packet */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigemptyset(&none);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() == 1)
		goto out; /* the parent is already gone */
	/* wake-ups within a microsecond of due, not the default 50 */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	printf("ready\n");
	fflush(stdout);

	while (!stop) {
		int64_t now = now_ns(), next = -1;
		struct timespec wait;

		for (i = 0; i < n; i++) {
			struct host *h = &hosts[i];
			while (h->head && h->head->due <= now) {
				struct packet *p = h->head;
				/* a full device queue loses the packet, as a link would */
				if (write(h->fd, p->data, p->len) < 0 && errno != EAGAIN && errno != EIO)
					fprintf(stderr, "hosts_switch: writing to host %d: %s\n", i, strerror(errno));
				h->head = p->next;
				if (!h->head)
					h->tail = NULL;
				free(p);
			}
			if (h->head && (next < 0 || h->head->due < next))
				next = h->head->due;
			fds[i].fd = h->fd;
			fds[i].events = POLLIN;
			fds[i].revents = 0;
		}
		if (next >= 0) {
			int64_t left = next - now;
			wait.tv_sec = left / 1000000000LL;
			wait.tv_nsec = left % 1000000000LL;
		}
		if (ppoll(fds, (nfds_t)n, next >= 0 ? &wait : NULL, &none) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "hosts_switch: ppoll: %s\n", strerror(errno));
			goto out;
		}
		now = now_ns();
		for (i = 0; i < n; i++) {
			if (!(fds[i].revents & POLLIN))
				continue;
			/* a bounded batch per host: one busy host does not starve the rest */
			for (k = 0; k < 64; k++) {
				ssize_t len = read(hosts[i].fd, buf, sizeof buf);
				if (len <= 0)
					break;
				take(hosts, n, i, buf, (size_t)len, net, delay, rate, now);
			}
		}
	}
	rc = 0;
out:
	for (i = 0; i < n; i++) {
		while (hosts[i].head) {
			struct packet *p = hosts[i].head;
			hosts[i].head = p->next;
			free(p);
		}
		if (hosts[i].fd >= 0)
			close(hosts[i].fd);
	}
	return rc;
}

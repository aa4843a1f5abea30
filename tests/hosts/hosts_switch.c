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
 * The receiver's link takes packets in the order the senders' links let
 * them go (a backlog at one sender does not hold up another's packets).
 * A packet that would wait more than 100 ms before either link starts on
 * it is dropped, as tbf's queue of 100 ms does on the veth links: TCP slows
 * down to the rate.
 * Packets are as large as the device's MTU (hosts.sh sets 65000, the size
 * of veth's GSO packets: at 1500 bytes a user-space switch could not carry
 * 10 Gbit/s on this machine's cores).
 *
 *   hosts_switch --net A.B.C.0 [--delay US] [--rate BITS_PER_S] [--parent PID] NETNS...
 *
 * Host i (from 0) is at A.B.C.(i+1); its namespace is the i-th NETNS, a name
 * of `ip netns` (/run/netns/NETNS). Prints "ready" on stdout once every
 * device exists (the caller then gives them addresses), then forwards until
 * SIGTERM or SIGINT, or until its parent (PID, where given) exits. Exits 1
 * with the reason when a device cannot be made or goes away, 2 on a bad
 * argument.
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

/* One packet on its way from one host to another. */
struct packet {
	struct packet *next; /* the next in the same queue, due no sooner */
	int64_t due;         /* CLOCK_MONOTONIC ns: when the sender's link has
			      * carried it (in a sender's queue), or when it is
			      * written to the receiver (in a receiver's) */
	int to;              /* the receiving host */
	size_t len;          /* bytes of data */
	unsigned char data[]; /* the IPv4 packet as the sender's device gave it */
};

/* A queue of packets in order of due time. */
struct queue {
	struct packet *head; /* the first due */
	struct packet *tail; /* the last (appends) */
};

/* A host: its device and its link's state. */
struct host {
	int fd;               /* the TUN device (eth0 in the host's namespace) */
	const char *name;     /* the namespace's name (messages) */
	int64_t tx_free;      /* when the host's link has sent all it was given */
	int64_t rx_free;      /* when the link has delivered all sent to the host */
	struct queue out;     /* packets on the host's link towards the switch */
	struct queue in;      /* packets past the switch, waiting for the delay */
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
	if (self < 0) {
		fprintf(stderr, "hosts_switch: cannot open /proc/self/ns/net: %s\n", strerror(errno));
		goto out;
	}
	ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0) {
		fprintf(stderr, "hosts_switch: cannot open %s: %s\n", path, strerror(errno));
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

static void push(struct queue *q, struct packet *p)
{
	p->next = NULL;
	if (q->tail)
		q->tail->next = p;
	else
		q->head = p;
	q->tail = p;
}

static struct packet *pop(struct queue *q)
{
	struct packet *p = q->head;

	q->head = p->next;
	if (!q->head)
		q->tail = NULL;
	return p;
}

/* Takes a packet from host S onto its link, or drops it. */
static void take(struct host *hosts, int n, int s, const unsigned char *buf, size_t len, uint32_t net,
		 double rate, int64_t now)
{
	struct host *src = &hosts[s];
	struct packet *p;
	uint32_t addr;
	int64_t start;
	int d;

	if (len < 20 || buf[0] >> 4 != 4)
		return; /* only IPv4 (the kernel's IPv6 chatter goes nowhere) */
	addr = (uint32_t)buf[16] << 24 | (uint32_t)buf[17] << 16 | (uint32_t)buf[18] << 8 | buf[19];
	d = (int)(addr - net) - 1;
	if ((addr & 0xffffff00u) != net || d < 0 || d >= n || d == s)
		return;
	start = src->tx_free > now ? src->tx_free : now;
	if (start - now > QUEUE_NS)
		return;
	p = malloc(sizeof *p + len);
	if (!p)
		return; /* a lost packet: TCP sends it again */
	/* a sender's packets leave in the order it sent them */
	src->tx_free = start + wire_ns(len, rate);
	p->due = src->tx_free;
	p->to = d;
	p->len = len;
	memcpy(p->data, buf, len);
	push(&src->out, p);
}

/* Moves the packets the senders' links have carried by NOW onto the
 * receivers' links, earliest first: each receiver's link then serves them
 * in the order they reached the switch. */
static void cross(struct host *hosts, int n, int64_t delay, double rate, int64_t now)
{
	for (;;) {
		struct packet *p;
		struct host *dst;
		int64_t start;
		int first = -1;

		for (int i = 0; i < n; i++)
			if (hosts[i].out.head && hosts[i].out.head->due <= now &&
			    (first < 0 || hosts[i].out.head->due < hosts[first].out.head->due))
				first = i;
		if (first < 0)
			return;
		p = pop(&hosts[first].out);
		dst = &hosts[p->to];
		start = dst->rx_free > p->due ? dst->rx_free : p->due;
		if (start - p->due > QUEUE_NS) {
			free(p);
			continue;
		}
		/* due times to one receiver only grow: its link's does */
		dst->rx_free = start + wire_ns(p->len, rate);
		p->due = dst->rx_free + delay;
		push(&dst->in, p);
	}
}

static int usage(void)
{
	fprintf(stderr, "usage: hosts_switch --net A.B.C.0 [--delay US] [--rate BITS_PER_S] [--parent PID] NETNS...\n");
	return 2;
}

/* A number from flag FLAG's value V within [LO, HI], or -1 after saying why. */
static double number(const char *flag, const char *v, double lo, double hi, const char *what)
{
	char *end;
	double x = strtod(v, &end);

	if (end == v || *end || !(x >= lo && x <= hi)) {
		fprintf(stderr, "hosts_switch: %s must be %s, not '%s'\n", flag, what, v);
		return -1;
	}
	return x;
}

static void drain(struct queue *q)
{
	while (q->head)
		free(pop(q));
}

int main(int argc, char **argv)
{
	struct host hosts[MAX_HOSTS];
	struct pollfd fds[MAX_HOSTS];
	static unsigned char buf[MAX_PACKET];
	unsigned a, b, c, z;
	char tail;
	uint32_t net = 0;
	int64_t delay = 0;
	double rate = 0, x;
	long parent = 0;
	int n = 0, i, k, rc = 1;
	struct sigaction sa;
	sigset_t block, none;

	memset(hosts, 0, sizeof hosts);
	for (i = 1; i < argc; i++) {
		const char *flag = argv[i];

		if (flag[0] == '-' && i + 1 == argc) {
			fprintf(stderr, "hosts_switch: %s needs a value\n", flag);
			return 2;
		}
		if (!strcmp(flag, "--net")) {
			if (sscanf(argv[++i], "%u.%u.%u.%u%c", &a, &b, &c, &z, &tail) != 4 || a > 255 || b > 255 ||
			    c > 255 || z != 0 || (a | b | c) == 0) {
				fprintf(stderr, "hosts_switch: --net must be a /24 network like 10.77.0.0, not '%s'\n", argv[i]);
				return 2;
			}
			net = a << 24 | b << 16 | c << 8;
		} else if (!strcmp(flag, "--delay")) {
			if ((x = number(flag, argv[++i], 0, 1e6, "microseconds, 0 to 1e6")) < 0)
				return 2;
			delay = (int64_t)(x * 1000);
		} else if (!strcmp(flag, "--rate")) {
			/* a full packet must fit the 100 ms queue */
			if ((x = number(flag, argv[++i], 1e7, 1e12, "bits per second, 1e7 to 1e12")) < 0)
				return 2;
			rate = x;
		} else if (!strcmp(flag, "--parent")) {
			if ((x = number(flag, argv[++i], 2, 1e9, "a process id")) < 0)
				return 2;
			parent = (long)x;
		} else if (flag[0] == '-') {
			return usage();
		} else if (n == MAX_HOSTS) {
			fprintf(stderr, "hosts_switch: at most %d hosts\n", MAX_HOSTS);
			goto out;
		} else {
			hosts[n].name = flag;
			hosts[n].fd = make_device(flag);
			if (hosts[n].fd < 0)
				goto out;
			n++;
		}
	}
	if (!net) {
		fprintf(stderr, "hosts_switch: --net is needed\n");
		goto out;
	}
	if (n < 2) {
		fprintf(stderr, "hosts_switch: needs 2 or more namespaces, got %d\n", n);
		goto out;
	}

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
	/* a parent gone before the line above sent no signal */
	if (parent && getppid() != parent)
		goto out;
	/* wake-ups within a microsecond of due, not the default 50 */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	printf("ready\n");
	fflush(stdout);

	while (!stop) {
		int64_t now = now_ns(), next = -1;
		struct timespec wait;

		cross(hosts, n, delay, rate, now);
		for (i = 0; i < n; i++) {
			struct host *h = &hosts[i];
			while (h->in.head && h->in.head->due <= now) {
				struct packet *p = pop(&h->in);
				/* EIO: the host's device is down, and the packet lost as on a link */
				if (write(h->fd, p->data, p->len) < 0 && errno != EIO)
					fprintf(stderr, "hosts_switch: writing to host %d: %s\n", i, strerror(errno));
				free(p);
			}
			if (h->in.head && (next < 0 || h->in.head->due < next))
				next = h->in.head->due;
			if (h->out.head && (next < 0 || h->out.head->due < next))
				next = h->out.head->due;
			fds[i].fd = h->fd;
			fds[i].events = POLLIN;
			fds[i].revents = 0;
		}
		if (next >= 0) {
			/* the writes above take time: the clock again */
			int64_t left = next - now_ns();
			if (left < 0)
				left = 0;
			wait.tv_sec = left / 1000000000LL;
			wait.tv_nsec = left % 1000000000LL;
		}
		if (ppoll(fds, (nfds_t)n, next >= 0 ? &wait : NULL, &none) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "hosts_switch: ppoll: %s\n", strerror(errno));
			goto out;
		}
		for (i = 0; i < n; i++) {
			if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
				fprintf(stderr, "hosts_switch: the device of host %d (namespace %s) is gone\n", i, hosts[i].name);
				goto out;
			}
			if (!(fds[i].revents & POLLIN))
				continue;
			/* a bounded batch per host: one busy host does not starve the rest */
			for (k = 0; k < 64; k++) {
				ssize_t len = read(hosts[i].fd, buf, sizeof buf);
				if (len <= 0)
					break;
				take(hosts, n, i, buf, (size_t)len, net, rate, now_ns());
			}
		}
	}
	rc = 0;
out:
	for (i = 0; i < n; i++) {
		drain(&hosts[i].out);
		drain(&hosts[i].in);
		close(hosts[i].fd);
	}
	return rc;
}

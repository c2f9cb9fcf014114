/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HAProxy agent check (scopebox-gateway-agent.socket, FileDescriptorName=agent): on each
 * connection one line, then close. The client is never read from. */
#pragma once

#include "gateway-server.h"

/* A fresh health answer is fetched for at most this many connections at once; more are closed
 * unanswered (counted). A cached answer (HEALTH_CACHE_USEC) is given at once, to any number. */
#define AGENT_WAITING_MAX   32U
/* Connections accepted per wakeup of the event loop, so that a flood can't starve HTTP. */
#define AGENT_ACCEPT_BURST  16U
/* How long a fresh answer may take; then the waiting connections are told "down". A daemon that
 * does not respond (http-health.h) makes it "down" at once. */
#define AGENT_HEALTH_TIMEOUT_USEC HEALTH_CALL_TIMEOUT_USEC
/* After accept() ran out of file descriptors, the listener rests this long. */
#define AGENT_ACCEPT_PAUSE_USEC (250U * USEC_PER_MSEC)

/* FileDescriptorName= of the agent check's socket. */
#define AGENT_SOCKET_NAME "agent"

/* Serves the agent check on an inherited listening socket; takes the fd, also on failure. */
int server_add_agent_fd(Server *s, int fd);
/* Closes the listeners and every waiting connection, cancels the health call. */
void server_free_agents(Server *s);

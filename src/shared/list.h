/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Intrusive doubly linked lists: an element embeds the links of each list it can be in, the
 * owner keeps a pointer to the first element. The macros only link and unlink; who frees an
 * element stays the owner's business. */
#pragma once

#include <assert.h>
#include <stddef.h>

/* The links of list 'name' inside an element of 'type': name##_next and name##_prev. An element
 * that is in no list has both NULL, and so does a zero-initialised one. */
#define LIST_FIELDS(type, name) type *name##_next, *name##_prev

/* Puts 'item', which must be in no list 'name', first in the list starting at 'head'. */
#define LIST_PREPEND(name, head, item)                                          \
        do {                                                                    \
                typeof(*(head)) **_head_ = &(head), *_item_ = (item);           \
                assert(_item_ && !_item_->name##_next && !_item_->name##_prev); \
                _item_->name##_next = *_head_;                                  \
                if (*_head_)                                                    \
                        (*_head_)->name##_prev = _item_;                        \
                *_head_ = _item_;                                               \
        } while (0)

/* Puts 'item' last: walks the list, for the short queues that are served in order. */
#define LIST_APPEND(name, head, item)                                           \
        do {                                                                    \
                typeof(*(head)) **_head_ = &(head), *_item_ = (item), *_tail_;  \
                assert(_item_ && !_item_->name##_next && !_item_->name##_prev); \
                _tail_ = *_head_;                                               \
                while (_tail_ && _tail_->name##_next)                           \
                        _tail_ = _tail_->name##_next;                           \
                if (_tail_) {                                                   \
                        _tail_->name##_next = _item_;                           \
                        _item_->name##_prev = _tail_;                           \
                } else                                                          \
                        *_head_ = _item_;                                       \
        } while (0)

/* Takes 'item' out of the list starting at 'head', which it must be in; its links end NULL. */
#define LIST_REMOVE(name, head, item)                                           \
        do {                                                                    \
                typeof(*(head)) **_head_ = &(head), *_item_ = (item);           \
                assert(_item_);                                                 \
                if (_item_->name##_next)                                        \
                        _item_->name##_next->name##_prev = _item_->name##_prev; \
                if (_item_->name##_prev)                                        \
                        _item_->name##_prev->name##_next = _item_->name##_next; \
                else {                                                          \
                        assert(*_head_ == _item_);                              \
                        *_head_ = _item_->name##_next;                          \
                }                                                               \
                _item_->name##_next = _item_->name##_prev = NULL;               \
        } while (0)

/* Whether 'item' is in the list at 'head' (its links are cleared when it leaves). */
#define LIST_CONTAINS(name, head, item) ((item)->name##_prev || (head) == (item))

/* Every element, first to last. The body must not unlink 'i': use LIST_FOREACH_SAFE for that. */
#define LIST_FOREACH(name, i, head) for (typeof(head) i = (head); i; i = i->name##_next)

/* The same, reading the next element before the body runs: the body may unlink or free 'i' (but
 * not the element after it). */
#define LIST_FOREACH_SAFE(name, i, n, head) \
        for (typeof(head) i = (head), n = i ? i->name##_next : NULL; i; i = n, n = i ? i->name##_next : NULL)

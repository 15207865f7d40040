use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn renewals_are_unwell_past_the_deadline_or_when_a_renewal_is_overdue() {
    let tally = Tally::default();
    assert_eq!(tally.unwell(), None, "nothing confirmed yet");
    tally.confirmed(Instant::now() + S);
    assert_eq!(tally.unwell(), None);
    tally.confirmed(Instant::now() - Duration::from_millis(1));
    assert!(tally.unwell().unwrap().contains("deadline"));
    // A new lease confirmed; then a session released in time forgets.
    tally.confirmed(Instant::now() + S);
    tally.released();
    assert_eq!(tally.safe_until(), None);
    // A loop that has not sent a renewal due a whole interval ago.
    tally.every.set(S);
    tally.due.set(Some(Instant::now() - 2 * S));
    assert!(tally.unwell().unwrap().contains("wedged"));
    tally.retired();
    assert_eq!(tally.unwell(), None);
    // What is out when the lease expires is given up with it.
    tally.out.set(2);
    tally.expired();
    assert_eq!((tally.failed.get(), tally.out.get()), (2, 0));
}

#[test]
fn default_grace_is_a_third_of_the_ttl() {
    let t = Timing::new(15 * S, None).unwrap();
    assert_eq!(t.grace(), 5 * S);
    assert_eq!(t.renew_every(), 5 * S);
}

#[test]
fn grace_must_leave_room_for_a_retry() {
    assert!(Timing::new(15 * S, Some(9 * S)).is_ok());
    let err = Timing::new(15 * S, Some(10 * S)).unwrap_err().to_string();
    assert!(err.contains("does not fit"), "{err}");
    assert!(Timing::new(15 * S, Some(Duration::ZERO)).is_err());
}

#[test]
fn ttl_bounds() {
    assert!(Timing::new(Duration::from_millis(999), None).is_err());
    assert!(Timing::new(S, None).is_ok());
    assert!(Timing::new(25 * 3600 * S, None).is_err());
}

#[test]
fn deadline_counts_from_the_send_time_and_the_smaller_ttl() {
    let t = Timing::new(10 * S, None).unwrap();
    let sent = Instant::from_nanos(1_000_000_000_000);
    // margin = 10s/50 + 50ms = 250ms
    assert_eq!(t.deadline(sent, 10 * S), sent + Duration::from_millis(9750));
    // the store granted more than asked: ours counts
    assert_eq!(t.deadline(sent, 60 * S), sent + Duration::from_millis(9750));
    // the store says less: its word counts
    assert_eq!(t.deadline(sent, 5 * S), sent + Duration::from_millis(4750));
    let t = t.granted(4 * S);
    assert_eq!(t.ttl(), 4 * S);
}

#[test]
fn a_renewal_that_waits_too_long_is_refused_with_what_would_do() {
    let t = Timing::new(3 * S, None).unwrap();
    assert_eq!(t.refuse_renewal_wait(Duration::from_millis(889), "w"), None);
    let said = t.refuse_renewal_wait(S, "w").unwrap();
    assert!(said.contains("to 3s 400ms or more"), "{said}");
    let t = Timing::new(Duration::from_millis(3400), None).unwrap();
    assert_eq!(t.refuse_renewal_wait(S, "w"), None);
}

#[test]
fn the_largest_round_trip_that_keeps_the_lease() {
    let ms = Duration::from_millis;
    for (ttl, limit) in [
        (S, Duration::from_nanos(263_333_334)),
        (3 * S, ms(890)),
        (15 * S, ms(4650)),
        (60 * S, ms(18750)),
    ] {
        let t = Timing::new(ttl, None).unwrap();
        assert_eq!(t.answer_within(), limit, "TTL {ttl:?}");
        assert_eq!(limit, ttl - t.renew_every() - t.grace() - t.margin());
        // Requests are awaited that long: the grace is what limits.
        assert!(limit < t.renew_every());
    }
}

#[test]
fn a_renewal_is_overdue_once_the_stop_is_nearer_than_its_answer_may_take() {
    // TTL 3 s: renewals every 1 s, grace 1 s, margin 110 ms, so a
    // renewal confirmed at 0 stops at 1.89 s, and the one sent at 1 s
    // may take 890 ms.
    let t = Timing::new(3 * S, None).unwrap();
    let confirmed = Instant::from_nanos(1_000_000_000_000);
    let deadline = t.deadline(confirmed, 3 * S);
    assert_eq!(t.answer_within(), 890 * MS);
    assert!(!t.overdue(deadline, confirmed));
    assert!(!t.overdue(deadline, confirmed + S));
    assert!(t.overdue(deadline, confirmed + S + MS));
    assert!(t.overdue(deadline, confirmed + 2 * S));
}

#[test]
fn stop_leaves_the_grace_before_the_deadline() {
    let t = Timing::new(9 * S, Some(2 * S)).unwrap();
    let d = Instant::from_nanos(50_000_000_000);
    assert_eq!(t.stop_at(d), d - 2 * S);
    assert!(t.stop_at(d) > d - t.ttl() + t.renew_every());
}

/// The store's side of the script: how long each renewal takes to be
/// answered, and what the answer is; `None` never answers.
type Script = std::rc::Rc<RefCell<std::collections::VecDeque<(Duration, Option<Answer>)>>>;

type Answer = Result<Renewal, StoreError>;

/// A renewer that plays a script on tokio's clock and notes when each
/// request was sent. What is left unscripted answers Alive at once.
struct Scripted {
    script: Script,
    sent: std::rc::Rc<RefCell<Vec<Instant>>>,
}

impl Renewer for Scripted {
    fn renew(&mut self) -> crate::store::Boxed<'_, Result<Renewal, StoreError>> {
        self.sent.borrow_mut().push(Instant::now());
        let (delay, answer) = self
            .script
            .borrow_mut()
            .pop_front()
            .unwrap_or((Duration::ZERO, Some(Ok(Renewal::Alive(3 * S)))));
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            match answer {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        })
    }

    fn reset(&mut self) {}
}

/// The send times the scripted renewers note.
type Sent = std::rc::Rc<RefCell<Vec<Instant>>>;

/// Two renewers playing `script` between them, and the send times they note.
fn scripted(script: Vec<(Duration, Option<Renewal>)>) -> ([Box<dyn Renewer>; 2], Sent) {
    let answers = script.into_iter().map(|(d, a)| (d, a.map(Ok))).collect();
    scripted_answers(answers)
}

/// [`scripted`], with failures among the answers.
fn scripted_answers(script: Vec<(Duration, Option<Answer>)>) -> ([Box<dyn Renewer>; 2], Sent) {
    let script: Script = std::rc::Rc::new(RefCell::new(script.into()));
    let sent = std::rc::Rc::new(RefCell::new(Vec::new()));
    let renewer = || -> Box<dyn Renewer> {
        Box::new(Scripted {
            script: script.clone(),
            sent: sent.clone(),
        })
    };
    ([renewer(), renewer()], sent)
}

/// Run `keep` at TTL 3s (grace 1s, margin 110 ms) over `script` for at
/// most `within`; the loss, if any, when it came, and the deadlines seen.
async fn play(
    script: Vec<(Duration, Option<Renewal>)>,
    within: Duration,
) -> (Option<(Loss, Duration)>, Vec<Instant>, Instant) {
    let answers = script.into_iter().map(|(d, a)| (d, a.map(Ok))).collect();
    play_answers(answers, within).await
}

/// [`play`], with failures among the answers.
async fn play_answers(
    script: Vec<(Duration, Option<Answer>)>,
    within: Duration,
) -> (Option<(Loss, Duration)>, Vec<Instant>, Instant) {
    let timing = Timing::new(3 * S, None).unwrap();
    let (renewers, sent) = scripted_answers(script);
    let granted_at = Instant::now();
    let (tx, rx) = watch::channel(timing.deadline(granted_at, 3 * S));
    let taking = Taking::default();
    let tally = Tally::default();
    let loss = tokio::select! {
        loss = keep(renewers, timing, granted_at, &tx, &taking, &tally) => {
            Some((loss, Instant::now().since(granted_at)))
        }
        () = tokio::time::sleep(within) => None,
    };
    let sent = sent.borrow().clone();
    let deadline = *rx.borrow();
    (loss, sent, deadline)
}

const MS: Duration = Duration::from_millis(1);

/// A lock taken by a request sent at 0.9 s, answered at 1.005 s, while
/// the renewal sent at 1 s was on its way: that renewal may have missed
/// the lock, so the deadline stays the taking request's own (0.9 s +
/// 3 s − 110 ms) until the renewal sent at 2 s, after the answer, is
/// confirmed.
#[tokio::test(start_paused = true)]
async fn a_lock_taken_by_its_own_request_caps_the_deadline_until_a_later_renewal() {
    let timing = Timing::new(3 * S, None).unwrap();
    let alive = (10 * MS, Some(Renewal::Alive(3 * S)));
    let (renewers, sent) = scripted(vec![alive; 10]);
    let t0 = Instant::now();
    let (tx, rx) = watch::channel(timing.deadline(t0, 3 * S));
    let taking = Taking::default();
    let at = |d: Duration| t0 + d;
    let watched = async {
        sleep_until(at(1005 * MS)).await;
        taking.taken.set(Some((at(900 * MS), Instant::now())));
        taking.told.notify_one();
        sleep_until(at(1500 * MS)).await;
        let capped = *rx.borrow();
        sleep_until(at(2500 * MS)).await;
        (capped, *rx.borrow())
    };
    let tally = Tally::default();
    let (capped, lifted) = tokio::select! {
        _ = keep(renewers, timing, t0, &tx, &taking, &tally) => panic!("lost"),
        seen = watched => seen,
    };
    assert_eq!(sent.borrow()[..2], [at(S), at(2 * S)]);
    assert_eq!(capped, at(900 * MS + 3 * S - 110 * MS));
    assert_eq!(lifted, at(2 * S + 3 * S - 110 * MS));
    assert!(taking.taken.get().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_renewal_counts_from_when_it_was_sent_not_when_answered() {
    let slow = (400 * MS, Some(Renewal::Alive(3 * S)));
    let (loss, sent, deadline) = play(vec![slow.clone(); 20], 10 * S).await;
    assert_eq!(loss, None);
    // The last request answered by now went out at least 400 ms ago.
    let answered = sent
        .iter()
        .rev()
        .find(|&&at| Instant::now().since(at) >= 400 * MS);
    assert_eq!(deadline, *answered.unwrap() + 3 * S - 110 * MS);
    // One request each TTL/3 after the one before was sent.
    assert_eq!(sent[1].since(sent[0]), S);
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_still_counts_and_another_request_goes_out_meanwhile() {
    // 700 ms: longer than the 500 ms after which a second request goes
    // out, shorter than the 890 ms a 3 s lease can live with.
    let late = (700 * MS, Some(Renewal::Alive(3 * S)));
    let (loss, sent, _) = play(vec![late; 40], 10 * S).await;
    assert_eq!(loss, None, "the lease was kept");
    assert_eq!(
        sent[1].since(sent[0]),
        500 * MS,
        "a second request after TTL/6"
    );
}

#[tokio::test(start_paused = true)]
async fn without_an_answer_the_lease_is_lost_at_the_stop_time() {
    let (loss, _, _) = play(vec![(Duration::ZERO, None); 40], 10 * S).await;
    let (loss, at) = loss.expect("lost");
    assert!(matches!(loss, Loss::Expired { .. }), "{loss:?}");
    // TTL 3s − margin 110 ms − grace 1s, from the grant.
    assert_eq!(at, 1890 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_round_trip_beyond_the_limit_loses_the_lease() {
    let too_slow = (1100 * MS, Some(Renewal::Alive(3 * S)));
    let (loss, _, _) = play(vec![too_slow; 40], 10 * S).await;
    assert!(matches!(loss, Some((Loss::Expired { .. }, _))), "{loss:?}");
}

#[tokio::test(start_paused = true)]
async fn the_stores_word_that_the_lease_is_gone_is_final_at_once() {
    let gone = (10 * MS, Some(Renewal::Gone("revoked".into())));
    let (loss, _, _) = play(vec![gone], 10 * S).await;
    let (loss, at) = loss.expect("lost");
    assert_eq!(loss, Loss::Gone("revoked".into()));
    assert_eq!(at, S + 10 * MS);
}

/// A renewal the store refused for load (an API server's 429) never
/// counts: refused all along, the lease is lost at the stop time, its
/// deadline never moved. Each is asked again once the pause the store
/// asked for has passed, but never so late that no try is left before
/// the stop time: half of what is left at most.
#[tokio::test(start_paused = true)]
async fn a_renewal_refused_for_load_never_counts_and_waits_as_asked_within_the_deadline() {
    let t0 = Instant::now();
    let refused = |asked: Duration| {
        let e = StoreError::crowded("429 Too Many Requests", Some(asked));
        (10 * MS, Some(Err(e)))
    };
    let (loss, sent, deadline) = play_answers(vec![refused(S); 40], 10 * S).await;
    let (loss, at) = loss.expect("lost");
    assert!(matches!(loss, Loss::Expired { .. }), "{loss:?}");
    assert_eq!(at, 1890 * MS);
    assert_eq!(deadline, t0 + 3 * S - 110 * MS);
    // Refused at 1.01 s, a second asked for, 0.88 s left: half of that.
    assert_eq!(sent[1].since(sent[0]), 10 * MS + 440 * MS);
    // Asked for 100 ms, which fits: no sooner, at most half as long again;
    // answered then, the lease is kept.
    let mut script = vec![refused(100 * MS)];
    script.extend(vec![(10 * MS, Some(Ok(Renewal::Alive(3 * S)))); 20]);
    let (loss, sent, _) = play_answers(script, 10 * S).await;
    assert_eq!(loss, None);
    let again = sent[1].since(sent[0]) - 10 * MS;
    assert!((100 * MS..=150 * MS).contains(&again), "{again:?}");
}
